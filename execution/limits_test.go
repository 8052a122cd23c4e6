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

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/leasehold/leasehold/execution"
	"github.com/leasehold/leasehold/internal/store/keys"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/job"
)

// setLimit writes a concurrency limit where the API does.
func (f *fixture) setLimit(t *testing.T, key string, limit int) {
	t.Helper()
	if err := f.rdb.HSet(t.Context(), keys.New(f.prefix).Limits(), key, limit).Err(); err != nil {
		t.Fatal(err)
	}
}

// liveHolders lists, for each key, the executions holding a live lease on
// it, on the Redis clock: one atomic read per key (each key's lease set is
// in a slot of its own).
func (f *fixture) liveHolders(t *testing.T, ckeys ...string) [][]string {
	t.Helper()
	out := make([][]string, len(ckeys))
	for i, k := range ckeys {
		held, err := liveMembers(t.Context(), f.rdb, keys.New(f.prefix).LeaseSet(k))
		if err != nil {
			t.Fatal(err)
		}
		out[i] = held
	}
	return out
}

// liveMembers lists the members of the lease set whose lease is live on
// the Redis clock, in one atomic read. It fails the caller's way, so that
// a sampling goroutine can use it.
func liveMembers(ctx context.Context, rdb redis.UniversalClient, set string) ([]string, error) {
	return rdb.Eval(ctx, `
		local t = redis.call('TIME')
		local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
		return redis.call('ZRANGE', KEYS[1], '(' .. now, '+inf', 'BYSCORE')`, []string{set}).StringSlice()
}

// inFlight counts handlers running at once in this process and remembers
// the most it saw.
type inFlight struct {
	now, peak atomic.Int64
}

func (c *inFlight) handler(work time.Duration) execution.Handler {
	return func(ctx context.Context, e *execution.Execution) (any, error) {
		n := c.now.Add(1)
		defer c.now.Add(-1)
		for p := c.peak.Load(); n > p && !c.peak.CompareAndSwap(p, n); p = c.peak.Load() {
		}
		select {
		case <-time.After(work):
			return "done", nil
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
	}
}

// observe samples key's live leases, and the queue's live execution leases
// (every job of the test carries key), until stop is closed or a sample is
// above limit, which fails the test. It may run in its own goroutine.
func (f *fixture) observe(t *testing.T, key string, limit int, stop <-chan struct{}) (samples int) {
	t.Helper()
	for {
		select {
		case <-stop:
			return samples
		default:
		}
		if n := len(f.liveHolders(t, key)[0]); n > limit {
			t.Errorf("%d live leases on %s, limit %d", n, key, limit)
			return samples
		}
		samples++
		time.Sleep(time.Millisecond)
	}
}

// The limit invariant: three workers in this process and three worker
// subprocesses whose handlers block, each holding a slot: one lives through
// the test (its heartbeats must keep its key lease alive), one is killed
// with SIGKILL and one paused past its lease. At every sample the key's live
// leases and this process's own handlers stay within the limit, and every
// job ends. (The queue's live execution leases are no measure of it: a
// paused worker's execution lease, taken in the claim after its key slot,
// can outlive that slot by the claim's round trip, while its handler is
// frozen and fenced by its trust timer on waking.)
func TestLimitHoldsAcrossWorkersCrashesAndPauses(t *testing.T) {
	t.Parallel()
	const limit = 3
	f := newFixture(t)
	f.setLimit(t, "model:a", limit)
	var jobs []string
	for range 60 {
		jobs = append(jobs, f.submit(t, job.Submission{Kind: faultKind, ConcurrencyKeys: []string{"model:a"}, MaxAttempts: 5}).ID)
	}
	var helpers []*testenv.Process
	for range limit {
		helpers = append(helpers, f.startHelper(t, "block", envConcurrency+"=1"))
	}
	// Each helper runs a handler: a slot held is not enough, as a claim
	// takes its key slots before it takes the job.
	for _, h := range helpers {
		h.Line(t, "started ", 10*time.Second)
	}
	holder, killed, paused := helpers[0], helpers[1], helpers[2]

	var local inFlight
	for range 3 {
		f.startWorker(t, execution.Config{Concurrency: 8, Heartbeat: 100 * time.Millisecond, LeaseTTL: time.Second},
			map[string]execution.Handler{faultKind: local.handler(10 * time.Millisecond)})
	}
	stop := make(chan struct{})
	var samples int
	var wg sync.WaitGroup
	wg.Go(func() { samples = f.observe(t, "model:a", limit, stop) })

	killed.Kill(t)
	paused.Stop(t)
	time.Sleep(2 * time.Second) // past the paused worker's 1s leases
	paused.Cont(t)
	// Fenced on waking, it would claim again and block on another job: end it.
	if cause := paused.Line(t, "stopped ", 10*time.Second); !strings.HasSuffix(cause, " lost") {
		t.Fatalf("paused handler stopped with %q, want lost", cause)
	}
	paused.Kill(t)
	// Everything but the holder's job ends; then the holder dies too.
	testenv.Eventually(t, 60*time.Second, func() bool {
		st, err := f.store.Stats(t.Context())
		return err == nil && len(st) == 1 && st[0].Queued == 0 && st[0].Retrying == 0 && st[0].Running == 1
	}, "jobs other than the holder's did not all end")
	holder.Kill(t)
	for _, id := range jobs {
		f.waitState(t, id, 60*time.Second, job.StateSucceeded)
	}
	close(stop)
	wg.Wait()
	if p := local.peak.Load(); p > limit-1 {
		t.Fatalf("%d handlers ran at once here while the holder held a slot, limit %d", p, limit)
	}
	t.Logf("%d samples; peak %d local handlers at once", samples, local.peak.Load())
}

// With several keys the tightest governs, and no handler runs without a
// live lease on every one of its keys.
func TestSeveralKeysAllOrNothing(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.setLimit(t, "model:a", 2)
	f.setLimit(t, "tenant:acme", 1)
	var local inFlight
	run := local.handler(20 * time.Millisecond)
	var partial atomic.Value
	f.startWorker(t, execution.Config{Concurrency: 8}, map[string]execution.Handler{
		faultKind: func(ctx context.Context, e *execution.Execution) (any, error) {
			held := f.liveHolders(t, "model:a", "tenant:acme")
			if !slices.Contains(held[0], e.ID) || !slices.Contains(held[1], e.ID) {
				partial.Store(fmt.Sprintf("execution %s runs holding model:a %v, tenant:acme %v", e.ID, held[0], held[1]))
			}
			return run(ctx, e)
		}})
	var ids []string
	for range 12 {
		ids = append(ids, f.submit(t, job.Submission{Kind: faultKind, ConcurrencyKeys: []string{"model:a"}}).ID)
	}
	for _, id := range ids {
		f.waitState(t, id, 30*time.Second, job.StateSucceeded)
	}
	if p := partial.Load(); p != nil {
		t.Fatal(p)
	}
	if p := local.peak.Load(); p > 1 {
		t.Fatalf("%d ran at once; the tighter key allows 1", p)
	}
}

// A job waiting for a full key does not hold up jobs behind it that can run.
func TestFullKeyDoesNotBlockJobsBehindIt(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.setLimit(t, "model:a", 1)
	f.startWorker(t, execution.Config{Concurrency: 4}, map[string]execution.Handler{faultKind: block, "echo": echo})
	a1 := f.submit(t, job.Submission{Kind: faultKind, ConcurrencyKeys: []string{"model:a"}})
	f.waitState(t, a1.ID, 10*time.Second, job.StateRunning)
	a2 := f.submit(t, job.Submission{Kind: faultKind, ConcurrencyKeys: []string{"model:a"}, Priority: 10})
	b := f.submit(t, job.Submission{Kind: "echo", ConcurrencyKeys: []string{"model:b"}})
	f.waitState(t, b.ID, 10*time.Second, job.StateSucceeded)
	if got := f.get(t, a2.ID); got.State != job.StateQueued {
		t.Fatalf("a2 is %s, want queued behind the full key", got.State)
	}
}

// Limits are read from Redis at run time: raising one lets waiting jobs
// start within seconds; lowering one stops nothing that runs.
func TestLimitChangesTakeEffectAtRunTime(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.setLimit(t, "model:a", 1)
	f.startWorker(t, execution.Config{Concurrency: 8}, map[string]execution.Handler{faultKind: block})
	var jobs []string
	for range 3 {
		jobs = append(jobs, f.submit(t, job.Submission{Kind: faultKind, ConcurrencyKeys: []string{"model:a"}}).ID)
	}
	running := func() int {
		n := 0
		for _, id := range jobs {
			if f.get(t, id).State == job.StateRunning {
				n++
			}
		}
		return n
	}
	testenv.Eventually(t, 10*time.Second, func() bool { return running() == 1 }, "one job never started")
	f.setLimit(t, "model:a", 3)
	testenv.Eventually(t, 10*time.Second, func() bool { return running() == 3 }, "raising the limit started nothing")
	f.setLimit(t, "model:a", 1)
	more := f.submit(t, job.Submission{Kind: faultKind, ConcurrencyKeys: []string{"model:a"}})
	f.waitState(t, more.ID, 10*time.Second, job.StateQueued)
	if n := running(); n != 3 {
		t.Fatalf("%d running after lowering the limit, want the 3 that were", n)
	}
}

// A job that waits for a key longer than its max_wait expires.
func TestWaitingForAKeyExpiresAtMaxWait(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.setLimit(t, "tenant:*", 1) // every tenant, acme included, gets 1
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	f.startWorker(t, execution.Config{Concurrency: 4, MeterProvider: mp}, map[string]execution.Handler{faultKind: block})
	first := f.submit(t, job.Submission{Kind: faultKind})
	f.waitState(t, first.ID, 10*time.Second, job.StateRunning)
	waiting := f.submit(t, job.Submission{Kind: faultKind, MaxWait: job.Duration(300 * time.Millisecond)})
	done := f.waitState(t, waiting.ID, 10*time.Second, job.StateExpired, job.StateRunning)
	if done.State != job.StateExpired || errCode(done) != job.CodeMaxWaitExceeded {
		t.Fatalf("state %s error %+v, want expired with max_wait_exceeded", done.State, done.Error)
	}
	// Counted under the limit that applies to tenant:acme.
	if n := counterValue(collect(t, reader), "leasehold.worker.expired", attribute.String("key", "tenant:*")); n != 1 {
		t.Errorf("leasehold.worker.expired{key=tenant:*} = %d, want 1", n)
	}
}
