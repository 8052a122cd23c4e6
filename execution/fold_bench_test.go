package execution_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/store"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/execution"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/job"
)

// BenchmarkFold runs 2 000 jobs that echo an input of 120 bytes (longer
// than a listpack's values, as an LLM prompt: a job whose values are all
// short is not folded), then folds their events and long fields into
// their folded keys and packs them (fold.go), and reports the Redis CPU and commands per job of each, in
// the same run, and the memory per job before and after: what folding
// costs beside running a job, and what it saves.
func BenchmarkFold(b *testing.B) {
	const jobs = 2000
	for range b.N {
		b.StopTimer()
		rdb := redis.NewClient(&redis.Options{Addr: testenv.StartRedis(b).Addr(), PoolSize: 64})
		prefix := testenv.Prefix(b)
		store := store.New(rdb, store.Config{Prefix: prefix})
		input := json.RawMessage(`{"prompt":"` + strings.Repeat("x", 106) + `"}`)
		subs := make([]job.BatchItem, 1000)
		for i := range subs {
			subs[i] = job.BatchItem{Submission: job.Submission{Kind: "echo", Input: input}}
		}
		for range jobs / len(subs) {
			if _, err := store.SubmitBatch(b.Context(), "acme", subs, job.Cap{}); err != nil {
				b.Fatal(err)
			}
		}
		w, err := execution.NewWorker(rdb, execution.Config{Prefix: prefix, Concurrency: 64, Poll: 10 * time.Millisecond})
		if err != nil {
			b.Fatal(err)
		}
		w.Handle("echo", echo)
		ctx, stop := context.WithCancel(b.Context())
		done := make(chan error, 1)
		cpu, cmds := testenv.RedisCPU(b, rdb), testenv.CommandsExecuted(b, rdb)
		go func() { done <- w.Run(ctx) }()
		testenv.Eventually(b, time.Minute, func() bool {
			s, err := store.Stats(b.Context())
			return err == nil && len(s) == 1 && s[0].Queued+s[0].Running == 0
		}, "jobs not run")
		stop()
		if err := <-done; err != nil {
			b.Fatal(err)
		}
		runCPU, runCmds := testenv.RedisCPU(b, rdb)-cpu, testenv.CommandsExecuted(b, rdb)-cmds
		before := memory(b, rdb)
		cpu, cmds = testenv.RedisCPU(b, rdb), testenv.CommandsExecuted(b, rdb)
		start := time.Now()
		b.StartTimer()
		for more := true; more; {
			if more, err = execution.Fold(b.Context(), w, 0); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		wall := time.Since(start)
		foldCPU, foldCmds := testenv.RedisCPU(b, rdb)-cpu, testenv.CommandsExecuted(b, rdb)-cmds
		if n := rdb.Keys(b.Context(), prefix+"*:events:*").Val(); len(n) != 0 {
			b.Fatalf("%d streams not folded", len(n))
		}
		b.ReportMetric(float64(before)/jobs, "bytes/job-before")
		b.ReportMetric(float64(memory(b, rdb))/jobs, "bytes/job-folded")
		b.ReportMetric(float64(runCPU.Microseconds())/jobs, "run-redis-cpu-µs/job")
		b.ReportMetric(float64(foldCPU.Microseconds())/jobs, "fold-redis-cpu-µs/job")
		b.ReportMetric(float64(runCmds)/jobs, "run-cmds/job")
		b.ReportMetric(float64(foldCmds)/jobs, "fold-cmds/job")
		b.ReportMetric(jobs/wall.Seconds(), "folds/s")
	}
}

// memory sums MEMORY USAGE over every key of the Redis behind rdb.
func memory(b *testing.B, rdb *redis.Client) int64 {
	var total int64
	it := rdb.Scan(b.Context(), 0, "*", 1000).Iterator()
	for it.Next(b.Context()) {
		total += rdb.MemoryUsage(b.Context(), it.Val(), 0).Val()
	}
	if err := it.Err(); err != nil {
		b.Fatal(err)
	}
	return total
}
