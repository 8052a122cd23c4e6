package execution_test

import (
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/store"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/execution"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/job"
)

// waitWorker runs a worker on rdb whose "wait" kind waits for "go" on its
// first execution and calls resumed on the next; polling is an hour and
// heartbeats a minute, so only the wake-up is fast and the worker's own
// commands add nearly nothing to a count.
func waitWorker(b *testing.B, rdb redis.UniversalClient, prefix string, concurrency int, resumed func(*execution.Execution)) {
	w, err := execution.NewWorker(rdb, execution.Config{Prefix: prefix, NATS: testenv.NATS(b).Conn(b), Poll: time.Hour,
		Heartbeat: time.Minute, LeaseTTL: 3 * time.Minute, Concurrency: concurrency})
	if err != nil {
		b.Fatal(err)
	}
	w.Handle("wait", func(_ context.Context, e *execution.Execution) (any, error) {
		if e.Resume().Signal == nil {
			return nil, execution.Wait("go", 24*time.Hour)
		}
		resumed(e)
		return nil, nil
	})
	w.Handle("noop", func(context.Context, *execution.Execution) (any, error) { return nil, nil })
	ctx, stop := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- w.Run(ctx) }()
	b.Cleanup(func() { stop(); <-ran })
}

// awaitWaiting waits until n jobs of store's default queue wait.
func awaitWaiting(b *testing.B, store *store.Store, n int64) {
	testenv.Eventually(b, 10*time.Minute, func() bool {
		st, err := store.Stats(b.Context())
		return err == nil && len(st) == 1 && st[0].Waiting == n
	}, "never %d jobs waiting", n)
}

// BenchmarkSignalToRunning measures, with an idle worker, the time from a
// signal to a waiting job (the store's write and the NATS wake-up, as the
// API sends them) to its resumed execution's handler starting: p50 and p99.
func BenchmarkSignalToRunning(b *testing.B) {
	rdb := testenv.Redis(b).Client(b)
	prefix := testenv.Prefix(b)
	nc := testenv.NATS(b).Conn(b)
	store := store.New(rdb, store.Config{Prefix: prefix})
	started := make(chan struct{}, 1)
	waitWorker(b, rdb, prefix, 32, func(*execution.Execution) { started <- struct{}{} })
	var took []time.Duration
	var waited int64
	for b.Loop() {
		j, _, err := store.Submit(b.Context(), "bench", job.Submission{Kind: "wait"}, "")
		if err != nil {
			b.Fatal(err)
		}
		_ = execution.Wake(nc, prefix, job.DefaultQueue)
		waited++
		b.StopTimer()
		awaitWaiting(b, store, 1)
		b.StartTimer()
		t0 := time.Now()
		if _, resumed, err := store.Signal(b.Context(), "bench", j.ID, false, "go", json.RawMessage(`{}`)); err != nil || !resumed {
			b.Fatalf("signal: resumed %v, %v", resumed, err)
		}
		_ = execution.Wake(nc, prefix, job.DefaultQueue)
		<-started
		took = append(took, time.Since(t0))
	}
	slices.Sort(took)
	b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(took[len(took)*99/100].Microseconds())/1000, "p99-ms")
}

// BenchmarkWaitCycle counts the Redis commands of a job that waits and is
// resumed by a signal (submit, claim, finish to waiting, signal, claim,
// finish), against a job that runs once (submit, claim, finish): the
// difference is what one wait-and-resume costs.
func BenchmarkWaitCycle(b *testing.B) {
	const jobs = 2000
	for _, kind := range []string{"noop", "wait"} {
		b.Run(kind, func(b *testing.B) {
			for range b.N {
				srv := testenv.StartRedis(b)
				rdb := srv.Client(b)
				prefix := testenv.Prefix(b)
				store := store.New(rdb, store.Config{Prefix: prefix})
				done := make(chan struct{}, jobs)
				waitWorker(b, rdb, prefix, 64, func(*execution.Execution) { done <- struct{}{} })
				nc := testenv.NATS(b).Conn(b)
				before := testenv.CommandsExecuted(b, rdb)
				testenv.Callgrind(b, rdb, "--zero") // make bench/instructions/wait
				ids := make([]string, jobs)
				for i := range ids {
					j, _, err := store.Submit(b.Context(), "bench", job.Submission{Kind: kind}, "")
					if err != nil {
						b.Fatal(err)
					}
					ids[i] = j.ID
				}
				_ = execution.Wake(nc, prefix, job.DefaultQueue)
				if kind == "wait" {
					awaitWaiting(b, store, jobs)
					for _, id := range ids {
						if _, _, err := store.Signal(b.Context(), "bench", id, false, "go", json.RawMessage(`{}`)); err != nil {
							b.Fatal(err)
						}
						_ = execution.Wake(nc, prefix, job.DefaultQueue)
					}
					for range jobs {
						<-done
					}
				}
				testenv.Eventually(b, 5*time.Minute, func() bool {
					st, err := store.Stats(b.Context())
					return err == nil && len(st) == 1 && st[0].Queued+st[0].Running+st[0].Waiting == 0
				}, "the jobs never ended")
				testenv.Callgrind(b, rdb, "--dump")
				b.ReportMetric(float64(testenv.CommandsExecuted(b, rdb)-before)/jobs, "redis-cmds/job")
			}
		})
	}
}

// BenchmarkClaimBesideWaiting runs 10k no-op jobs beside 0 or 100k jobs
// waiting for a signal (a day away), and reports what the waiting ones
// hold in Redis and what they cost the claims of the others.
func BenchmarkClaimBesideWaiting(b *testing.B) {
	const jobs = 10_000
	for _, waiting := range []int{0, 100_000} {
		b.Run("waiting="+strconv.Itoa(waiting), func(b *testing.B) {
			for range b.N {
				srv := testenv.StartRedis(b)
				rdb := srv.Client(b)
				prefix := testenv.Prefix(b)
				store := store.New(rdb, store.Config{Prefix: prefix})
				waitWorker(b, rdb, prefix, 200, func(*execution.Execution) {})
				nc := testenv.NATS(b).Conn(b)
				mem0 := testenv.RedisMemory(b, rdb)
				if waiting > 0 {
					submitAll(b, store, waiting, func(int) job.Submission { return job.Submission{Kind: "wait"} })
					_ = execution.Wake(nc, prefix, job.DefaultQueue)
					awaitWaiting(b, store, int64(waiting))
					b.ReportMetric(float64(testenv.RedisMemory(b, rdb)-mem0)/float64(waiting), "redis-bytes/waiting-job")
				}
				cmds, cpu := testenv.CommandsExecuted(b, rdb), testenv.RedisCPU(b, rdb)
				t0 := time.Now()
				submitAll(b, store, jobs, func(int) job.Submission { return job.Submission{Kind: "noop"} })
				_ = execution.Wake(nc, prefix, job.DefaultQueue)
				testenv.Eventually(b, 10*time.Minute, func() bool {
					st, err := store.Stats(b.Context())
					return err == nil && len(st) == 1 && st[0].Queued+st[0].Running == 0
				}, "the jobs never ended")
				elapsed := time.Since(t0)
				b.ReportMetric(float64(jobs)/elapsed.Seconds(), "jobs/s")
				b.ReportMetric(float64(testenv.CommandsExecuted(b, rdb)-cmds)/jobs, "redis-cmds/job")
				b.ReportMetric(float64((testenv.RedisCPU(b, rdb)-cpu).Microseconds())/jobs, "redis-cpu-µs/job")
			}
		})
	}
}
