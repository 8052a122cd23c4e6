package remote_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/execution"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/job"
	"github.com/leasehold/leasehold/kinds/remote"
)

// noop answers every execution at once with an empty JSON result.
func noop(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	w.Header().Set("Content-Type", remote.ContentJSON)
	_, _ = io.WriteString(w, "{}")
}

// benchWorker starts a worker of concurrency c serving kind remotely and
// "inproc" in the process, for the rest of the benchmark.
func benchWorker(b *testing.B, f *fixture, c int) {
	rdb := testenv.Redis(b).Client(b)
	w, err := execution.NewWorker(rdb, execution.Config{
		Prefix: f.prefix, CancelSubject: f.subject, NATS: f.nc, Concurrency: c,
		Heartbeat: 500 * time.Millisecond, LeaseTTL: 5 * time.Second, Poll: 20 * time.Millisecond,
		ShutdownGrace: 5 * time.Second,
	})
	if err != nil {
		b.Fatal(err)
	}
	remote.Register(w, map[string]string{kind: f.srv.URL}, remote.Config{MaxConns: c})
	w.Handle("inproc", func(context.Context, *execution.Execution) (any, error) { return struct{}{}, nil })
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	b.Cleanup(func() { stop(); <-done })
}

// submitAll submits n jobs of kind from 16 goroutines and returns their ids.
func submitAll(b *testing.B, f *fixture, kind string, n int) []string {
	ids := make([]string, n)
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			for i := g; i < n; i += 16 {
				j, _, err := f.store.Submit(context.Background(), "acme", job.Submission{Kind: kind, Input: json.RawMessage(`{}`)}, "")
				if err != nil {
					b.Error(err)
					return
				}
				ids[i] = j.ID
			}
		})
	}
	wg.Wait()
	return ids
}

func waitAll(b *testing.B, f *fixture, ids []string) {
	for _, id := range ids {
		testenv.Eventually(b, time.Minute, func() bool {
			j, err := f.store.Get(context.Background(), "acme", id, false)
			return err == nil && j.State == job.StateSucceeded
		}, "job %s did not succeed", id)
	}
}

// BenchmarkThroughput runs no-op jobs through a worker of concurrency 50
// and 200, served by a remote handler on loopback and, in the same run, by
// an in-process handler: jobs/s of each.
func BenchmarkThroughput(b *testing.B) {
	for _, c := range []int{50, 200} {
		for _, k := range []string{kind, "inproc"} {
			b.Run(fmt.Sprintf("%s/concurrency=%d", k, c), func(b *testing.B) {
				f := newFixture(b, noop)
				benchWorker(b, f, c)
				const jobs = 2000
				b.ResetTimer()
				for range b.N {
					start := time.Now()
					waitAll(b, f, submitAll(b, f, k, jobs))
					b.ReportMetric(float64(jobs)/time.Since(start).Seconds(), "jobs/s")
				}
			})
		}
	}
}

// holderProcess serves remote executions that hold their request open
// until the worker closes it, in a process of its own so that its
// goroutines and memory are not counted as the worker's. It prints
// "listening <url>".
func holderProcess() int {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		<-r.Context().Done()
	}))
	fmt.Println("listening", srv.URL)
	select {}
}

// BenchmarkInFlight holds 1,000 remote executions in flight on one worker
// and reports the worker's goroutines and heap per execution, beside the
// same for 1,000 in-process executions that block.
func BenchmarkInFlight(b *testing.B) {
	const n = 1000
	holder := testenv.StartHelper(b, "holder")
	url := holder.Line(b, "listening ", 10*time.Second)
	for _, k := range []string{kind, "inproc"} {
		b.Run(k, func(b *testing.B) {
			for range b.N {
				f := newFixture(b, noop)
				f.srv.URL = url // the holder, out of process
				rdb := testenv.Redis(b).Client(b)
				runtime.GC()
				var before runtime.MemStats
				runtime.ReadMemStats(&before)
				goroutines := runtime.NumGoroutine()
				w, err := execution.NewWorker(rdb, execution.Config{
					Prefix: f.prefix, CancelSubject: f.subject, NATS: f.nc, Concurrency: n,
					Heartbeat: time.Second, LeaseTTL: 10 * time.Second, Poll: 20 * time.Millisecond, ShutdownGrace: time.Millisecond,
				})
				if err != nil {
					b.Fatal(err)
				}
				remote.Register(w, map[string]string{kind: url}, remote.Config{MaxConns: n})
				var running sync.WaitGroup
				running.Add(n)
				w.Handle("inproc", func(ctx context.Context, _ *execution.Execution) (any, error) {
					running.Done()
					<-ctx.Done()
					return nil, context.Cause(ctx)
				})
				ctx, stop := context.WithCancel(context.Background())
				done := make(chan error, 1)
				go func() { done <- w.Run(ctx) }()
				ids := submitAll(b, f, k, n)
				if k == "inproc" {
					running.Wait()
				} else {
					testenv.Eventually(b, time.Minute, func() bool {
						for _, id := range slices.Backward(ids) {
							if j, err := f.store.Get(context.Background(), "acme", id, false); err != nil || j.State != job.StateRunning {
								return false
							}
						}
						return true
					}, "not all %d executions run", n)
				}
				runtime.GC()
				var after runtime.MemStats
				runtime.ReadMemStats(&after)
				b.ReportMetric(float64(runtime.NumGoroutine()-goroutines)/n, "goroutines/exec")
				b.ReportMetric(float64(after.HeapInuse-before.HeapInuse)/n, "heap-bytes/exec")
				stop()
				<-done
			}
		})
	}
}

// BenchmarkCancelToClose measures, over 200 cancels with NATS up, the time
// from the end of the cancel call (the API's 202) until the remote handler
// sees its request closed.
func BenchmarkCancelToClose(b *testing.B) {
	started := make(chan struct{})
	closed := make(chan time.Time)
	f := newFixture(b, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", remote.ContentNDJSON)
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		started <- struct{}{}
		<-r.Context().Done()
		closed <- time.Now()
	})
	benchWorker(b, f, 8)
	const cancels = 200
	for range b.N {
		var lat []time.Duration
		for range cancels {
			j := submitAll(b, f, kind, 1)[0]
			<-started
			if _, err := execution.CancelJob(context.Background(), f.store, f.flags, "acme", j, false); err != nil {
				b.Fatal(err)
			}
			accepted := time.Now()
			lat = append(lat, (<-closed).Sub(accepted))
		}
		slices.Sort(lat)
		b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1e3, "p50-ms")
		b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1e3, "p99-ms")
	}
}
