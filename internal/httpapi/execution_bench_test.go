package httpapi_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/execution"
	"github.com/leasehold/leasehold/internal/httpapi"
	"github.com/leasehold/leasehold/internal/store"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/kinds"
	"github.com/leasehold/leasehold/ratelimit/usage"
)

// BenchmarkExecution submits 5000 echo jobs through the API (five POST
// /v1/jobs/batch), then runs them with one worker wired as cmd/worker
// wires it (NATS for wake-ups and cancels, usage counted, the default
// concurrency of 32), on one Redis of its own, and reports the Redis
// commands per execution (INFO commandstats, those inside scripts
// included), from the worker's start until every job succeeded, and
// jobs/s (docs/benchmarks.md).
func BenchmarkExecution(b *testing.B) {
	const jobs, batch = 5000, 1000
	for range b.N {
		b.StopTimer()
		srv := testenv.StartRedis(b)
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true, PoolSize: 64})
		nc := testenv.NATS(b).Conn(b)
		prefix := testenv.Prefix(b)
		counters, err := usage.New(store.New(rdb, store.Config{Prefix: prefix}), usage.Config{})
		if err != nil {
			b.Fatal(err)
		}
		keys, err := httpapi.ParseKeys(apiKeys)
		if err != nil {
			b.Fatal(err)
		}
		h, err := httpapi.New(httpapi.Config{Redis: rdb, NATS: nc, Keys: keys, Prefix: prefix, Usage: counters, RedisTimeout: 10 * time.Second})
		if err != nil {
			b.Fatal(err)
		}
		ts := httptest.NewServer(h)
		items := make([]string, batch)
		for i := range items {
			items[i] = fmt.Sprintf(`{"kind":"echo","input":{"n":%d}}`, i)
		}
		body := `{"jobs":[` + strings.Join(items, ",") + `]}`
		for range jobs / batch {
			req, _ := http.NewRequest(http.MethodPost, ts.URL+"/v1/jobs/batch", strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+acmeKey)
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				b.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode/100 != 2 {
				b.Fatalf("batch submit: %s", resp.Status)
			}
		}
		store := store.New(rdb, store.Config{Prefix: prefix})
		w, err := execution.NewWorker(rdb, execution.Config{Prefix: prefix, NATS: nc, Usage: counters})
		if err != nil {
			b.Fatal(err)
		}
		w.Handle("echo", kinds.Echo)
		ctx, stop := context.WithCancel(context.Background())
		ran := make(chan error, 1)
		cmds := testenv.CommandsExecuted(b, rdb)
		start := time.Now()
		b.StartTimer()
		go func() { ran <- w.Run(ctx) }()
		// Every job was queued, and none is queued or running any more.
		testenv.Eventually(b, 5*time.Minute, func() bool {
			st, err := store.Stats(context.Background())
			return err == nil && len(st) == 1 && st[0].Queued == 0 && st[0].Running == 0
		}, "the jobs never all ended")
		elapsed := time.Since(start)
		b.StopTimer()
		stop()
		<-ran // the last usage counts are written as Run returns
		b.ReportMetric(float64(testenv.CommandsExecuted(b, rdb)-cmds)/jobs, "redis-cmds/execution")
		b.ReportMetric(jobs/elapsed.Seconds(), "jobs/s")
		b.ReportMetric(0, "ns/op")
		ts.Close()
		rdb.Close()
	}
}
