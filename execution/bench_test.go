package execution_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/store"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/leasehold/leasehold/execution"
	"github.com/leasehold/leasehold/internal/replicas"
	"github.com/leasehold/leasehold/internal/store/keys"
	"github.com/leasehold/leasehold/internal/store/scripts"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/job"
)

// tripCounter counts the round trips a client makes: one per command sent
// alone, one per pipeline; times the claim script's, and counts the finish
// script's.
type tripCounter struct {
	n              atomic.Int64
	claims, claimT atomic.Int64 // claim scripts run, and the total time in ns of their round trips
	finishes       atomic.Int64 // finish scripts run
}

// claimSHA and finishSHA name the claim and finish scripts in an EVALSHA.
var (
	claimSHA  = execution.ClaimScript.Hash()
	finishSHA = execution.FinishScript.Hash()
)

// timeClaim counts a claim's round trip, which ends when the func it
// returns is called.
func (c *tripCounter) timeClaim() func() {
	t0 := time.Now()
	return func() { c.claims.Add(1); c.claimT.Add(int64(time.Since(t0))) }
}

func (c *tripCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *tripCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.n.Add(1)
		if args := cmd.Args(); len(args) > 1 && cmd.Name() == "evalsha" && args[1] == claimSHA {
			defer c.timeClaim()()
		}
		return next(ctx, cmd)
	}
}
func (c *tripCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.n.Add(1)
		for _, cmd := range cmds {
			args := cmd.Args()
			if len(args) < 2 || cmd.Name() != "evalsha" {
				continue
			}
			switch args[1] {
			case finishSHA:
				c.finishes.Add(1)
			case claimSHA: // a fused claim's (see execution.fused)
				defer c.timeClaim()()
			}
		}
		return next(ctx, cmds)
	}
}

// BenchmarkThroughput pre-enqueues no-op jobs, then measures how fast one
// worker process runs them end to end (claim, heartbeat, finish) at several
// concurrencies, with Redis round trips and commands per job.
func BenchmarkThroughput(b *testing.B) {
	benchEach(b, "concurrency", []int{10, 50, 200}, func(concurrency int) benchRun {
		return benchRun{jobs: 20_000, concurrency: concurrency}
	})
}

// BenchmarkThroughputReplicated is BenchmarkThroughput on a Redis with one
// replica, the worker's claims waiting for it (MIN_REPLICAS=1) or not (0):
// what WAIT costs a claim.
func BenchmarkThroughputReplicated(b *testing.B) {
	for _, n := range []int{0, 1} {
		b.Run(fmt.Sprintf("min_replicas=%d", n), func(b *testing.B) {
			benchEach(b, "concurrency", []int{10, 50, 200}, func(concurrency int) benchRun {
				return benchRun{jobs: 20_000, concurrency: concurrency, replica: true, minReplicas: n}
			})
		})
	}
}

// BenchmarkWorkerWithNATS is BenchmarkThroughput with the worker on NATS,
// as deployed: each execution is also watched for a fast cancel (one
// cancel.Watcher Watch, and a read of its flag).
func BenchmarkWorkerWithNATS(b *testing.B) {
	benchEach(b, "concurrency", []int{50, 200}, func(concurrency int) benchRun {
		return benchRun{jobs: 20_000, concurrency: concurrency, nats: true}
	})
}

// BenchmarkClaimKeys runs 10k no-op jobs whose concurrency keys spread over
// 1, 10 or 1,000 distinct limited keys (each limit high enough never to
// wait), against the same jobs with no key but their tenant's: what keys
// cost a claim.
func BenchmarkClaimKeys(b *testing.B) {
	const jobs, concurrency = 10_000, 50
	benchEach(b, "keys", []int{0, 1, 10, 1000}, func(n int) benchRun {
		run := benchRun{jobs: jobs, concurrency: concurrency, limits: map[string]int{}}
		if n > 0 {
			for i := range n {
				run.limits[fmt.Sprintf("model:m%d", i)] = concurrency
			}
			run.submission = func(i int) job.Submission {
				return job.Submission{Kind: "noop", ConcurrencyKeys: []string{fmt.Sprintf("model:m%d", i%n)}}
			}
		}
		return run
	})
}

// BenchmarkClaimBudget runs 10k no-op jobs of a cost of 10 tokens that all
// name one key limited to 200, with no budget (limit), or with an rpm and a
// tpm too large to wait for (budget): what checking and reserving a budget,
// and settling it at the finish, cost.
func BenchmarkClaimBudget(b *testing.B) {
	for _, name := range []string{"limit", "budget"} {
		b.Run(name, func(b *testing.B) {
			run := benchRun{jobs: 10_000, concurrency: 50, limits: map[string]int{"model:b": 200},
				submission: func(int) job.Submission {
					return job.Submission{Kind: "noop", ConcurrencyKeys: []string{"model:b"}, Cost: &job.Cost{Tokens: 10}}
				}}
			if name == "budget" {
				run.budgets = map[string]job.Budget{"model:b": {RPM: 1_000_000_000, TPM: 1_000_000_000_000}}
			}
			for range b.N {
				benchThroughput(b, run)
			}
		})
	}
}

// BenchmarkWebhookOutbox runs 10k no-op jobs without a webhook (none)
// and with one (webhook): what the delivery that the move to succeeded
// adds to the queue's outbox, and its fields on the job, cost a finish.
// No drainer runs: the deliveries stay in the outbox.
func BenchmarkWebhookOutbox(b *testing.B) {
	for _, name := range []string{"none", "webhook"} {
		b.Run(name, func(b *testing.B) {
			run := benchRun{jobs: 10_000, concurrency: 50}
			if name == "webhook" {
				run.submission = func(int) job.Submission {
					return job.Submission{Kind: "noop", Webhook: &job.WebhookTarget{URL: "https://hooks.example.com/leasehold/done"}}
				}
			}
			for range b.N {
				benchThroughput(b, run)
			}
		})
	}
}

// BenchmarkClaimBehindFullKey runs 10k no-op jobs queued behind a backlog
// of 100k jobs whose key has a limit of 0 (none of them can run), against
// the same jobs with no backlog: a claim's cost must not grow with a
// backlog it cannot serve.
func BenchmarkClaimBehindFullKey(b *testing.B) {
	benchEach(b, "backlog", []int{0, 100_000}, func(backlog int) benchRun {
		return benchRun{jobs: 10_000, concurrency: 50, backlog: backlog, limits: map[string]int{"model:full": 0}}
	})
}

// BenchmarkHotKeyAcrossQueues runs 20k no-op jobs that all name one key,
// limited to 1,000, spread over 3 queues in turn, with one worker serving
// the three, against the same jobs in one queue: what a key's lease set
// shared by queues (in the key's own slot) costs a claim.
func BenchmarkHotKeyAcrossQueues(b *testing.B) {
	benchEach(b, "queues", []int{1, 3}, func(queues int) benchRun {
		return benchRun{jobs: 20_000, concurrency: 200, queues: queues,
			limits: map[string]int{"model:hot": 1000},
			submission: func(int) job.Submission {
				return job.Submission{Kind: "noop", ConcurrencyKeys: []string{"model:hot"}}
			}}
	})
}

// BenchmarkClusterQueues runs 20k no-op jobs spread over 3 queues, with
// one worker serving the three, on a three-master Redis Cluster: the
// queues on the master of the tenant's lease set (masters=1), or one
// queue on each master (masters=3). Redis CPU is reported for each
// master: m0 holds the tenant's lease set, m1 and m2 are the others.
func BenchmarkClusterQueues(b *testing.B) {
	benchEach(b, "masters", []int{1, 3}, func(masters int) benchRun {
		return benchRun{jobs: 20_000, concurrency: 200, queues: 3, cluster: true, spread: masters == 3}
	})
}

// benchEach runs a sub-benchmark name=v of benchThroughput(run(v)) for
// each of values.
func benchEach(b *testing.B, name string, values []int, run func(v int) benchRun) {
	for _, v := range values {
		b.Run(fmt.Sprintf("%s=%d", name, v), func(b *testing.B) {
			r := run(v)
			for range b.N {
				benchThroughput(b, r)
			}
		})
	}
}

// benchRun is one throughput run: jobs no-op jobs (submission(i), default
// a bare no-op) after backlog jobs that wait for model:full, run by one
// worker at concurrency (on NATS if nats), with limits set first. With
// queues > 1 the jobs go to that many queues in turn, all served by the
// worker. With cluster, Redis is a three-master Cluster, and the queues
// are on the master of the tenant's lease set, or one on each master if
// spread.
type benchRun struct {
	jobs, concurrency, backlog int
	queues                     int
	nats, cluster, spread      bool
	// replica: the Redis has one; minReplicas: the worker's claims wait
	// for this many replicas (LEASEHOLD_REDIS_MIN_REPLICAS).
	replica     bool
	minReplicas int
	submission  func(i int) job.Submission
	limits      map[string]int
	budgets     map[string]job.Budget // beside the limit of the same key
}

// submitAll submits n jobs, sub(i) for i in [0, n), 32 at a time.
func submitAll(b *testing.B, store *store.Store, n int, sub func(i int) job.Submission) {
	var wg sync.WaitGroup
	next := atomic.Int64{}
	for range 32 {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < int64(n); i = next.Add(1) - 1 {
				if _, _, err := store.Submit(context.Background(), "bench", sub(int(i)), ""); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// benchRedis is the Redis of one run: one redis-server, or the masters of
// a Cluster.
type benchRedis struct {
	addrs       []string
	cluster     bool
	minReplicas int // the workers' clients wait for this many replicas
}

// client returns a new client of r with a pool of size connections (0:
// go-redis's default), closed when the benchmark ends.
func (r benchRedis) client(b *testing.B, size int) redis.UniversalClient {
	// Without maintenance notifications (Redis 7 sends none): go-redis
	// leaves a goroutine running after Close for a client of a cluster
	// node that has them on.
	off := &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	var c redis.UniversalClient = redis.NewClient(&redis.Options{Addr: r.addrs[0], PoolSize: size, MaintNotificationsConfig: off})
	if r.cluster {
		c = redis.NewClusterClient(&redis.ClusterOptions{Addrs: r.addrs, PoolSize: size, MaintNotificationsConfig: off})
	}
	if err := replicas.Require(c, r.minReplicas, time.Second); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	return c
}

// masters returns a client of each of r's masters, in the order of addrs.
func (r benchRedis) masters(b *testing.B) []redis.UniversalClient {
	out := make([]redis.UniversalClient, len(r.addrs))
	for i, addr := range r.addrs {
		out[i] = benchRedis{addrs: []string{addr}}.client(b, 0)
	}
	return out
}

// freshStore starts an empty redis-server (or Cluster) for one run, so that
// what earlier runs left behind (their memory, an AOF rewrite of it) is not
// measured, and returns it with a client, a key prefix and a job store on
// it.
func freshStore(b *testing.B, cluster, replica bool) (benchRedis, redis.UniversalClient, string, *store.Store) {
	r := benchRedis{cluster: cluster}
	if cluster {
		r.addrs = testenv.StartCluster(b).Addrs() // AOF fsync every second: Redis's default
	} else {
		srv := testenv.StartRedis(b, "--appendfsync", "everysec")
		r.addrs = []string{srv.Addr()}
		if replica {
			testenv.StartReplica(b, srv)
		}
	}
	rdb, prefix := r.client(b, 0), testenv.Prefix(b)
	store := store.New(rdb, store.Config{Prefix: prefix})
	return r, rdb, prefix, store
}

// queueNames names the run's queues: none (the default queue) unless it
// asks for several, or for a Cluster, where each name is chosen for the
// master its slot is on (see benchRun), and masters is reordered so that
// the tenant's lease set's master comes first.
func queueNames(b *testing.B, run benchRun, rdb redis.UniversalClient, prefix string, masters []string) []string {
	if !run.cluster {
		if run.queues <= 1 {
			return nil
		}
		names := make([]string, run.queues)
		for i := range names {
			names[i] = fmt.Sprintf("q%d", i)
		}
		return names
	}
	ks := keys.New(prefix)
	masterOf := func(key string) string {
		c, err := rdb.(*redis.ClusterClient).MasterForKey(b.Context(), key)
		if err != nil {
			b.Fatal(err)
		}
		return c.Options().Addr
	}
	home := masterOf(ks.LeaseSet("tenant:bench"))
	i := slices.Index(masters, home)
	masters[0], masters[i] = masters[i], masters[0]
	var names []string
	for n := 0; len(names) < run.queues; n++ {
		name := fmt.Sprintf("q%d", n)
		want := home
		if run.spread {
			want = masters[len(names)%len(masters)]
		}
		if masterOf(ks.QueueLeases(name)) == want {
			names = append(names, name)
		}
	}
	return names
}

// rewriteAOF rewrites the AOF and waits for the rewrite to end. Loading the
// jobs grew it to where Redis would rewrite it (a fork, then copy-on-write
// faults) during the run: the clock starts after.
func rewriteAOF(b *testing.B, rdb redis.UniversalClient) {
	b.Helper()
	if err := rdb.BgRewriteAOF(b.Context()).Err(); err != nil && !strings.Contains(err.Error(), "already in progress") {
		b.Fatal(err)
	}
	testenv.Eventually(b, 5*time.Minute, func() bool {
		info, err := rdb.Info(b.Context(), "persistence").Result()
		return err == nil && strings.Contains(info, "aof_rewrite_in_progress:0") && strings.Contains(info, "aof_rewrite_scheduled:0")
	}, "the AOF rewrite never ended")
}

// sumOver adds up f over the masters.
func sumOver(masters []redis.UniversalClient, f func(redis.UniversalClient) int64) int64 {
	var n int64
	for _, m := range masters {
		n += f(m)
	}
	return n
}

func benchThroughput(b *testing.B, run benchRun) {
	b.StopTimer()
	jobs, concurrency := run.jobs, run.concurrency
	r, rdb, prefix, store := freshStore(b, run.cluster, run.replica)
	queues := queueNames(b, run, rdb, prefix, r.addrs)
	masters := r.masters(b)
	for k, n := range run.limits {
		n := int64(n)
		if err := store.SetKeyLimit(b.Context(), k, job.KeyLimit{Limit: &n, Budget: run.budgets[k]}); err != nil {
			b.Fatal(err)
		}
	}
	memBefore := sumOver(masters, func(m redis.UniversalClient) int64 { return testenv.RedisMemory(b, m) })
	submitAll(b, store, run.backlog, func(int) job.Submission {
		return job.Submission{Kind: "noop", ConcurrencyKeys: []string{"model:full"}}
	})
	if run.submission == nil {
		run.submission = func(int) job.Submission { return job.Submission{Kind: "noop"} }
	}
	submitAll(b, store, jobs, func(i int) job.Submission {
		sub := run.submission(i)
		if len(queues) > 0 {
			sub.Queue = queues[i%len(queues)]
		}
		return sub
	})
	for _, m := range masters {
		rewriteAOF(b, m)
	}

	trips := &tripCounter{}
	r.minReplicas = run.minReplicas
	wrdb := r.client(b, 64)
	wrdb.AddHook(trips)
	var done atomic.Int64
	finished := make(chan struct{})
	// No fold during the run: under callgrind a run lasts minutes, and
	// the folds of its first jobs would be counted as its jobs' work
	// (BenchmarkFold measures the fold).
	cfg := execution.Config{Prefix: prefix, Queues: queues, Concurrency: concurrency, Poll: 10 * time.Millisecond,
		FoldAfter: time.Hour}
	if run.nats {
		cfg.NATS = testenv.NATS(b).Conn(b)
	}
	w, err := execution.NewWorker(wrdb, cfg)
	if err != nil {
		b.Fatal(err)
	}
	w.Handle("noop", func(context.Context, *execution.Execution) (any, error) {
		if done.Add(1) == int64(jobs) {
			close(finished)
		}
		return nil, nil
	})
	cmdsBefore := sumOver(masters, func(m redis.UniversalClient) int64 { return testenv.CommandsExecuted(b, m) })
	redisCPU := make([]time.Duration, len(masters))
	for i, m := range masters {
		redisCPU[i] = testenv.RedisCPU(b, m)
	}
	workerCPU := testenv.ProcessCPU(b)
	ctx, stop := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	testenv.Callgrind(b, rdb, "--zero")
	start := time.Now()
	b.StartTimer()
	go func() { ran <- w.Run(ctx) }()
	<-finished
	// The last finishes are written after the last handler returns.
	testenv.Eventually(b, time.Minute, func() bool {
		st, err := store.Stats(context.Background())
		var running, queued int64
		for _, q := range st {
			running, queued = running+q.Running, queued+q.Queued
		}
		return err == nil && len(st) == max(len(queues), 1) && running == 0 && queued == int64(run.backlog)
	}, "jobs still running")
	elapsed := time.Since(start)
	b.StopTimer()
	testenv.Callgrind(b, rdb, "--dump")
	stop()
	<-ran
	cmds := sumOver(masters, func(m redis.UniversalClient) int64 { return testenv.CommandsExecuted(b, m) }) - cmdsBefore
	// Every job has ended and is retained: what one costs to keep for
	// its retention, hash and events (the backlog's waiting jobs too).
	mem := sumOver(masters, func(m redis.UniversalClient) int64 { return testenv.RedisMemory(b, m) })
	b.ReportMetric(float64(mem-memBefore)/float64(jobs+run.backlog), "redis-bytes/job")
	var redisTotal time.Duration
	for i, m := range masters {
		redisCPU[i] = testenv.RedisCPU(b, m) - redisCPU[i]
		redisTotal += redisCPU[i]
		if len(masters) > 1 {
			b.ReportMetric(float64(redisCPU[i].Microseconds())/float64(jobs), fmt.Sprintf("m%d-redis-cpu-µs/job", i))
		}
	}
	b.ReportMetric(float64(redisTotal.Microseconds())/float64(jobs), "redis-cpu-µs/job")
	workerCPU = testenv.ProcessCPU(b) - workerCPU
	b.ReportMetric(float64(workerCPU.Microseconds())/float64(jobs), "worker-cpu-µs/job")

	b.ReportMetric(float64(jobs)/elapsed.Seconds(), "jobs/s")
	if n := trips.claims.Load(); n > 0 {
		b.ReportMetric(float64(trips.claimT.Load())/float64(n)/1e3, "µs/claim-script")
		b.ReportMetric(float64(jobs)/float64(n), "jobs/claim")
	}
	if n := trips.finishes.Load(); n > 0 {
		b.ReportMetric(float64(jobs)/float64(n), "jobs/finish")
	}
	b.ReportMetric(float64(trips.n.Load())/float64(jobs), "trips/job")
	b.ReportMetric(float64(cmds)/float64(jobs), "redis-cmds/job")
}

// BenchmarkThroughputBaseline runs the same number of no-op jobs through
// the naive design, a Redis list (RPOP to take, HSET to record), with the
// same concurrency: no leases, no fencing, no retries, no events. It is the
// yardstick for BenchmarkThroughput on the same machine in the same run.
func BenchmarkThroughputBaseline(b *testing.B) {
	const jobs = 20_000
	for _, concurrency := range []int{10, 50, 200} {
		b.Run(fmt.Sprintf("concurrency=%d", concurrency), func(b *testing.B) {
			for range b.N {
				b.StopTimer()
				srv := testenv.StartRedis(b, "--appendfsync", "everysec")
				rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), PoolSize: concurrency})
				list := testenv.Prefix(b) + "list"
				for i := 0; i < jobs; i += 1000 {
					batch := make([]any, 1000)
					for j := range batch {
						batch[j] = i + j
					}
					rdb.LPush(b.Context(), list, batch...)
				}
				redisCPU := testenv.RedisCPU(b, rdb)
				start := time.Now()
				b.StartTimer()
				var wg sync.WaitGroup
				for range concurrency {
					wg.Go(func() {
						for {
							id, err := rdb.RPop(context.Background(), list).Result()
							if err != nil {
								return // redis.Nil: the list is empty
							}
							rdb.HSet(context.Background(), list+":done", id, "ok")
						}
					})
				}
				wg.Wait()
				b.StopTimer()
				b.ReportMetric(float64(jobs)/time.Since(start).Seconds(), "jobs/s")
				b.ReportMetric(float64((testenv.RedisCPU(b, rdb)-redisCPU).Microseconds())/float64(jobs), "redis-cpu-µs/job")
				rdb.Close()
			}
		})
	}
}

// BenchmarkThroughputFloor is the other yardstick: the same jobs, submitted
// the same way, go through only the writes their lives make here (the
// claim's HSET, running event and lease; the finish's HSET, end event, lease
// release and retirement), one script per batch of 70 for each, two batches
// in flight: no peek, reads, checks, tokens, fairness, limits, stats or
// worker. It is what these records cost Redis before anything that makes
// claiming them correct: the ceiling of this data model on the machine.
func BenchmarkThroughputFloor(b *testing.B) {
	const jobs, batch = 20_000, 70
	for range b.N {
		b.StopTimer()
		_, rdb, prefix, store := freshStore(b, false, false)
		submitAll(b, store, jobs, func(int) job.Submission { return job.Submission{Kind: "noop"} })
		rewriteAOF(b, rdb)
		ks, q := keys.New(prefix), job.DefaultQueue
		lane := ks.QueueLane(q, `noop["tenant:bench"]`)
		fixed := []string{ks.QueueLeases(q), ks.QueueRetired(q)}
		redisCPU := testenv.RedisCPU(b, rdb)
		start := time.Now()
		b.StartTimer()
		var wg sync.WaitGroup
		for range 2 {
			wg.Go(func() {
				for {
					ids, err := rdb.ZPopMin(context.Background(), lane, batch).Result()
					if err != nil || len(ids) == 0 {
						return
					}
					keys, args := fixed, []any{scripts.EventsMaxLen}
					for _, z := range ids {
						id := z.Member.(string)
						keys = append(keys, ks.Job(q, id), ks.JobEvents(q, id))
						args = append(args, id)
					}
					for _, script := range []*redis.Script{floorClaim, floorFinish} {
						if err := script.Run(context.Background(), rdb, keys, args...).Err(); err != nil {
							b.Error(err)
							return
						}
					}
				}
			})
		}
		wg.Wait()
		b.StopTimer()
		b.ReportMetric(float64(jobs)/time.Since(start).Seconds(), "jobs/s")
		b.ReportMetric(float64((testenv.RedisCPU(b, rdb)-redisCPU).Microseconds())/float64(jobs), "redis-cpu-µs/job")
	}
}

// floorClaim and floorFinish write what the claim and finish scripts write
// for each job of a batch. KEYS: leases, retired, then each job's hash and
// events. ARGV: events MAXLEN, then the job ids.
var (
	floorClaim = redis.NewScript(`
local t = redis.call('TIME')
local now = t[1] .. string.sub(t[2], 1, 3)
local leases = {}
for i = 3, #KEYS, 2 do
  redis.call('HSET', KEYS[i], 'state', 'running', 'attempt', '1', 'token', '1000000', 'exec_id',
    '0193a4f2-7c1e-7d2a-9b1e-0123456789ab', 'exec_worker', 'bench-worker', 'exec_attempt', '1',
    'exec_started_at', now, 'exec_heartbeat_at', now, 'exec_state', 'running', 'started_at', now)
  redis.call('XADD', KEYS[i + 1], 'MAXLEN', '~', ARGV[1], '*', 'type', 'state', 'data', '{"state":"running","attempt":1,"job":' ..
    '{"token":"1000000","cancel_requested":"0","started_at":"' .. now .. '","exec_id":"0193a4f2-7c1e-7d2a-9b1e-0123456789ab",' ..
    '"exec_worker":"bench-worker","exec_attempt":"1","exec_started_at":"' .. now .. '","exec_heartbeat_at":"' .. now .. '"}}')
  leases[#leases + 1], leases[#leases + 2] = now, ARGV[(i + 1) / 2]
end
return redis.call('ZADD', KEYS[1], unpack(leases))`)
	floorFinish = redis.NewScript(`
local t = redis.call('TIME')
local now = t[1] .. string.sub(t[2], 1, 3)
local released, retired = {}, {}
for i = 3, #KEYS, 2 do
  redis.call('HSET', KEYS[i], 'exec_state', 'succeeded', 'exec_finished_at', now, 'exec_trace', '',
    'result', 'null', 'error', '', 'state', 'succeeded', 'finished_at', now)
  redis.call('XADD', KEYS[i + 1], 'MAXLEN', '~', ARGV[1], '*', 'type', 'state', 'data', '{"state":"succeeded","attempt":1,"job":' ..
    '{"token":"1000000","cancel_requested":"0","started_at":"' .. now .. '","exec_id":"0193a4f2-7c1e-7d2a-9b1e-0123456789ab",' ..
    '"exec_worker":"bench-worker","exec_attempt":"1","exec_started_at":"' .. now .. '","exec_heartbeat_at":"' .. now .. '",' ..
    '"exec_finished_at":"' .. now .. '","finished_at":"' .. now .. '"}}')
  released[#released + 1] = ARGV[(i + 1) / 2]
  retired[#retired + 1], retired[#retired + 2] = now, ARGV[(i + 1) / 2]
end
redis.call('ZREM', KEYS[1], unpack(released))
return redis.call('ZADD', KEYS[2], unpack(retired))`)
)

// BenchmarkIdlePickup measures how long an idle worker takes from a job's
// submission (and its NATS wake-up) to the handler starting. Polling is set
// to an hour, so only the wake-up can be this fast.
func BenchmarkIdlePickup(b *testing.B) {
	rdb := testenv.Redis(b).Client(b)
	nc := testenv.NATS(b).Conn(b)
	prefix := testenv.Prefix(b)
	store := store.New(rdb, store.Config{Prefix: prefix})
	w, err := execution.NewWorker(rdb, execution.Config{Prefix: prefix, NATS: nc, Poll: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	started := make(chan struct{})
	w.Handle("noop", func(context.Context, *execution.Execution) (any, error) {
		started <- struct{}{}
		return nil, nil
	})
	ctx, stop := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- w.Run(ctx) }()
	defer func() { stop(); <-ran }()
	var total time.Duration
	for b.Loop() {
		t0 := time.Now()
		if _, _, err := store.Submit(b.Context(), "bench", job.Submission{Kind: "noop"}, ""); err != nil {
			b.Fatal(err)
		}
		if err := execution.Wake(nc, prefix, job.DefaultQueue); err != nil {
			b.Fatal(err)
		}
		<-started
		total += time.Since(t0)
	}
	b.ReportMetric(float64(total.Microseconds())/float64(b.N)/1000, "ms/pickup")
}
