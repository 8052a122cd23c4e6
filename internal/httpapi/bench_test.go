package httpapi_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/internal/httpapi"
	"github.com/leasehold/leasehold/internal/replicas"
	"github.com/leasehold/leasehold/internal/testenv"
)

// BenchmarkSubmit compares, in one run on one Redis of its own, 1000 jobs
// submitted as 1000 POST /v1/jobs by 16 concurrent clients with the same
// 1000 jobs in one POST /v1/jobs/batch; each op is 1000 jobs. It reports
// jobs/s, and Redis commands and Redis CPU per job, and this process's CPU
// per job (the API and its clients): on a small machine the two CPUs
// bound the jobs/s together (docs/benchmarks.md).
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
		cmds, cpu, goCPU := testenv.CommandsExecuted(b, rdb), testenv.RedisCPU(b, rdb), testenv.ProcessCPU(b)
		start := time.Now()
		for b.Loop() {
			run()
		}
		elapsed := time.Since(start)
		n := float64(b.N * jobs)
		b.ReportMetric(n/elapsed.Seconds(), "jobs/s")
		b.ReportMetric(float64(testenv.CommandsExecuted(b, rdb)-cmds)/n, "redis-cmds/job")
		b.ReportMetric(float64((testenv.RedisCPU(b, rdb)-cpu).Microseconds())/n, "redis-µs/job")
		b.ReportMetric(float64((testenv.ProcessCPU(b)-goCPU).Microseconds())/n, "go-µs/job")
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

// BenchmarkSubmitReplicated measures the cost of
// LEASEHOLD_REDIS_MIN_REPLICAS=1 on POST /v1/jobs: two APIs on one Redis
// with one replica (on the same host), one whose writes wait for the
// replica (WAIT 1, timeout 1 s) and one whose writes do not (0). Each
// client alternates between them request by request, so both see the same
// load; it reports each one's submit latency p50 and p99 (µs), their
// ratios, and the WAITs a replicated submit sent (docs/benchmarks.md). An
// op is 200 submits to each API.
func BenchmarkSubmitReplicated(b *testing.B) {
	primary := testenv.StartRedis(b)
	testenv.StartReplica(b, primary)
	keys, err := httpapi.ParseKeys(apiKeys)
	if err != nil {
		b.Fatal(err)
	}
	prefix := testenv.Prefix(b)
	api := func(minReplicas int) string {
		rdb := redis.NewClient(&redis.Options{Addr: primary.Addr(), ContextTimeoutEnabled: true, PoolSize: 32})
		b.Cleanup(func() { rdb.Close() })
		if err := replicas.Require(rdb, minReplicas, time.Second); err != nil {
			b.Fatal(err)
		}
		h, err := httpapi.New(httpapi.Config{Redis: rdb, Keys: keys, Prefix: prefix, RedisTimeout: 10 * time.Second})
		if err != nil {
			b.Fatal(err)
		}
		ts := httptest.NewServer(h)
		b.Cleanup(ts.Close)
		return ts.URL
	}
	urls := [2]string{api(0), api(1)}
	stats := primary.Client(b)
	waits := func() int64 { // WAIT commands run, from INFO commandstats
		text, err := stats.Info(b.Context(), "commandstats").Result()
		if err != nil {
			b.Fatal(err)
		}
		_, after, _ := strings.Cut(text, "cmdstat_wait:calls=")
		n, _ := strconv.ParseInt(after[:strings.IndexByte(after+",", ',')], 10, 64)
		return n
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 32}}
	submit := func(url string) time.Duration {
		req, err := http.NewRequest(http.MethodPost, url+"/v1/jobs", strings.NewReader(`{"kind":"echo","input":{"n":1}}`))
		if err != nil {
			b.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+acmeKey)
		req.Header.Set("Content-Type", "application/json")
		start := time.Now()
		resp, err := client.Do(req)
		if err != nil {
			b.Error(err)
			return 0
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		took := time.Since(start)
		if resp.StatusCode != http.StatusCreated {
			b.Errorf("submit: %s", resp.Status)
		}
		return took
	}
	const perOp = 200
	for _, clients := range []int{1, 16} {
		b.Run(fmt.Sprintf("clients-%d", clients), func(b *testing.B) {
			var mu sync.Mutex
			var took [2][]time.Duration
			waited := waits()
			for b.Loop() {
				next := make(chan int, perOp)
				for i := range perOp {
					next <- i
				}
				close(next)
				var wg sync.WaitGroup
				for range clients {
					wg.Go(func() {
						for i := range next {
							// Alternate which API goes first, so neither always
							// follows the other's write.
							first := i % 2
							a, c := submit(urls[first]), submit(urls[1-first])
							mu.Lock()
							took[first] = append(took[first], a)
							took[1-first] = append(took[1-first], c)
							mu.Unlock()
						}
					})
				}
				wg.Wait()
			}
			var p [2][2]float64 // [min replicas][p50, p99] in µs
			for k := range took {
				slices.Sort(took[k])
				for j, q := range []float64{0.50, 0.99} {
					p[k][j] = float64(took[k][int(q*float64(len(took[k])-1))].Microseconds())
				}
			}
			b.ReportMetric(p[0][0], "p50-µs-min0")
			b.ReportMetric(p[0][1], "p99-µs-min0")
			b.ReportMetric(p[1][0], "p50-µs-min1")
			b.ReportMetric(p[1][1], "p99-µs-min1")
			b.ReportMetric(p[1][0]/p[0][0], "p50-ratio")
			b.ReportMetric(p[1][1]/p[0][1], "p99-ratio")
			b.ReportMetric(float64(waits()-waited)/float64(len(took[1])), "waits/submit")
			b.ReportMetric(0, "ns/op")
		})
	}
}
