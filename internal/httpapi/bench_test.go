package httpapi_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/internal/httpapi"
	"github.com/leasehold/leasehold/internal/testenv"
)

// BenchmarkSubmit compares, in one run on one Redis of its own, 1000 jobs
// submitted as 1000 POST /v1/jobs by 16 concurrent clients with the same
// 1000 jobs in one POST /v1/jobs/batch; each op is 1000 jobs. It reports
// jobs/s, and Redis commands and Redis CPU per job (docs/benchmarks.md).
func BenchmarkSubmit(b *testing.B) {
	srv := testenv.StartRedis(b)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true, PoolSize: 32})
	b.Cleanup(func() { rdb.Close() })
	keys, err := httpapi.ParseKeys(apiKeys)
	if err != nil {
		b.Fatal(err)
	}
	h, err := httpapi.New(httpapi.Config{Redis: rdb, Keys: keys, Prefix: testenv.Prefix(b), RedisTimeout: 10 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	ts := httptest.NewServer(h)
	b.Cleanup(ts.Close)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	post := func(path, body string) {
		req, err := http.NewRequest(http.MethodPost, ts.URL+path, strings.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+acmeKey)
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			b.Error(err)
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			b.Errorf("%s: %s", path, resp.Status)
		}
	}
	const jobs, clients = 1000, 16
	items := make([]string, jobs)
	for i := range items {
		items[i] = fmt.Sprintf(`{"kind":"echo","input":{"n":%d},"metadata":{"batch":"bench"}}`, i)
	}
	batch := `{"jobs":[` + strings.Join(items, ",") + `]}`
	report := func(b *testing.B, run func()) {
		cmds, cpu := testenv.CommandsExecuted(b, rdb), testenv.RedisCPU(b, rdb)
		start := time.Now()
		for b.Loop() {
			run()
		}
		elapsed := time.Since(start)
		n := float64(b.N * jobs)
		b.ReportMetric(n/elapsed.Seconds(), "jobs/s")
		b.ReportMetric(float64(testenv.CommandsExecuted(b, rdb)-cmds)/n, "redis-cmds/job")
		b.ReportMetric(float64((testenv.RedisCPU(b, rdb)-cpu).Microseconds())/n, "redis-µs/job")
		b.ReportMetric(0, "ns/op")
	}
	b.Run("single-16", func(b *testing.B) {
		report(b, func() {
			next := make(chan string, jobs)
			for _, it := range items {
				next <- it
			}
			close(next)
			var wg sync.WaitGroup
			for range clients {
				wg.Go(func() {
					for body := range next {
						post("/v1/jobs", body)
					}
				})
			}
			wg.Wait()
		})
	})
	b.Run("batch", func(b *testing.B) {
		report(b, func() { post("/v1/jobs/batch", batch) })
	})
}
