package execution_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/execution"
	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/internal/store/keys"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/job"
)

// claimLog records the fencing token each job's execution got. Tokens are
// issued by one counter per queue, in claim order, so they say how many
// claims came before a job's (once the counter is set above the clock:
// countFrom).
type claimLog struct {
	mu     sync.Mutex
	tokens map[string]fencing.Token
}

// fairLease is the lease TTL of the workers whose claims the fairness
// tests count (see claimsUntilAllRan).
const fairLease = 5 * time.Second

func (l *claimLog) handler(_ context.Context, e *execution.Execution) (any, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.tokens[e.JobID] = e.Token()
	return nil, nil
}

func (l *claimLog) token(id string) (fencing.Token, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	t, ok := l.tokens[id]
	return t, ok
}

// claimsUntilAllRan waits until every job of ids ran and returns how many
// claims were made from before (the queue's fence counter then) until the
// last of them.
//
// The fence counts every execution claimed, also one handed back because
// its claim took longer than the lease TTL, or retried after its lease was
// lost: the worker counting claims runs under fairLease, long enough that
// neither happens on a loaded machine, where claims of over 500 ms (the
// fixture's TTL) were seen and added a dozen "claims" to the count.
func (l *claimLog) claimsUntilAllRan(t *testing.T, before int64, ids []string) int64 {
	t.Helper()
	var last fencing.Token
	testenv.Eventually(t, 60*time.Second, func() bool {
		for _, id := range ids {
			tok, ok := l.token(id)
			if !ok {
				return false
			}
			last = max(last, tok)
		}
		return true
	}, "the small tenant's jobs never all ran")
	return int64(last) - before
}

// submitMany submits n jobs of sub for tenant, several at a time.
func (f *fixture) submitMany(t *testing.T, tenant string, n int, sub job.Submission) []string {
	t.Helper()
	ids := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Go(func() {
			for i := w; i < n; i += 16 {
				var j job.Job
				j, _, errs[i] = f.store.Submit(t.Context(), tenant, sub, "")
				ids[i] = j.ID
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	return ids
}

// fairBound is the claims within which a tenant's small jobs all start
// beside a flood on one worker of concurrency (see below).
func fairBound(small, concurrency int) int64 {
	return int64((2*small+concurrency-1)/concurrency*concurrency + 2*concurrency)
}

// The bound of execution/doc.go: with L lanes waiting at one priority, a
// lane's k-th job is claimed within k·L claims of its submission, rounded
// up to a whole batch (a claim gives each lane at its head its share of
// the batch at once, in any order), plus the claims already under way (at
// most one batch per worker; the small tenant's ten submissions take
// long enough for a second).
func TestSmallTenantIsNotStarvedByAFlood(t *testing.T) {
	f := newFixture(t)
	const flood, small, concurrency = 10_000, 10, 8
	f.submitMany(t, "flood", flood, job.Submission{Kind: "noop"})

	log := &claimLog{tokens: map[string]fencing.Token{}}
	f.startWorker(t, execution.Config{Concurrency: concurrency, LeaseTTL: fairLease},
		map[string]execution.Handler{"noop": log.handler})
	fence := keys.New(f.prefix).QueueFence(job.DefaultQueue)
	from := f.countFrom(t, fence)
	testenv.Eventually(t, 30*time.Second, func() bool {
		n, _ := f.rdb.Get(t.Context(), fence).Int64()
		return n-from >= 500
	}, "the flood never got going")

	before, err := f.rdb.Get(t.Context(), fence).Int64()
	if err != nil {
		t.Fatal(err)
	}
	ids := f.submitMany(t, "small", small, job.Submission{Kind: "noop"})
	claims := log.claimsUntilAllRan(t, before, ids)
	bound := fairBound(small, concurrency)
	t.Logf("the small tenant's %d jobs all started within %d claims of their submission (bound %d)", small, claims, bound)
	if claims > bound {
		t.Fatalf("the small tenant waited %d claims for its %d jobs; the bound is %d", claims, small, bound)
	}
	if n, err := f.rdb.ZCard(t.Context(), keys.New(f.prefix).QueueReady(job.DefaultQueue)).Result(); err != nil || n == 0 {
		t.Fatalf("the flood ran out (%d left, %v) before the small tenant's jobs ran: the test proved nothing", n, err)
	}
}

// Priority orders a tenant's own jobs, never one tenant ahead of another:
// a flood of priority-100 jobs on a full key does not pass a small
// tenant's priority-0 jobs on the same key, which still start within the
// bound of TestSmallTenantIsNotStarvedByAFlood.
func TestPriorityDoesNotPassOtherTenants(t *testing.T) {
	f := newFixture(t)
	const flood, small, concurrency = 2_000, 10, 8
	f.setLimit(t, "model:x", 2)
	f.submitMany(t, "flood", flood, job.Submission{Kind: "slow", Priority: 100, ConcurrencyKeys: []string{"model:x"}})

	log := &claimLog{tokens: map[string]fencing.Token{}}
	f.startWorker(t, execution.Config{Concurrency: concurrency, LeaseTTL: fairLease},
		map[string]execution.Handler{"slow": func(ctx context.Context, e *execution.Execution) (any, error) {
			_, _ = log.handler(ctx, e)
			time.Sleep(2 * time.Millisecond) // long enough that the key is full at every claim
			return nil, nil
		}})
	fence := keys.New(f.prefix).QueueFence(job.DefaultQueue)
	from := f.countFrom(t, fence)
	testenv.Eventually(t, 30*time.Second, func() bool {
		n, _ := f.rdb.Get(t.Context(), fence).Int64()
		return n-from >= 50
	}, "the flood never got going")

	before, err := f.rdb.Get(t.Context(), fence).Int64()
	if err != nil {
		t.Fatal(err)
	}
	ids := f.submitMany(t, "small", small, job.Submission{Kind: "slow", ConcurrencyKeys: []string{"model:x"}})
	claims := log.claimsUntilAllRan(t, before, ids)
	bound := fairBound(small, concurrency)
	t.Logf("the small tenant's %d priority-0 jobs all started within %d claims of their submission (bound %d)", small, claims, bound)
	if claims > bound {
		t.Fatalf("the small tenant waited %d claims behind a priority-100 flood; the bound is %d", claims, bound)
	}
	if n, err := f.rdb.ZCard(t.Context(), keys.New(f.prefix).QueueReady(job.DefaultQueue)).Result(); err != nil || n == 0 {
		t.Fatalf("the flood ran out (%d left, %v) before the small tenant's jobs ran: the test proved nothing", n, err)
	}
}

// A lane is a tenant's jobs with one set of keys: a deep backlog waiting
// for a full key, deeper than a claim looks past the head, does not hold
// back the same tenant's jobs for another key — not the first few, and not
// after many claims have passed the full lane by.
func TestJobsForAFreeKeyPassADeepBacklogForAFullOne(t *testing.T) {
	f := newFixture(t)
	f.setLimit(t, "model:full", 1)
	const deep, free = 1000, 1000 // each far past the claim's look-ahead
	stuck := f.submitMany(t, "acme", 1, job.Submission{Kind: "block", ConcurrencyKeys: []string{"model:full"}})
	var ran atomic.Int64
	f.startWorker(t, execution.Config{Concurrency: 4}, map[string]execution.Handler{
		"block": block,
		"count": func(context.Context, *execution.Execution) (any, error) { ran.Add(1); return nil, nil },
	})
	f.waitState(t, stuck[0], 10*time.Second, job.StateRunning)

	f.submitMany(t, "acme", deep, job.Submission{Kind: "block", ConcurrencyKeys: []string{"model:full"}})
	f.submitMany(t, "acme", free, job.Submission{Kind: "count", ConcurrencyKeys: []string{"model:free"}})
	testenv.Eventually(t, 60*time.Second, func() bool { return ran.Load() == free },
		"the %d jobs for the free key never all ran behind %d waiting for the full one", free, deep)
	if got := f.liveHolders(t, "model:full"); len(got[0]) != 1 {
		t.Fatalf("model:full (limit 1) is held by %v", got[0])
	}
	limits, err := f.store.Limits(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if want := []job.Limit{{Key: "model:full", Limit: job.Some(1), InUse: 1, Waiting: deep}}; !slices.Equal(limits, want) {
		t.Errorf("limits %+v, want %+v: every claim counts its job out of its lane", limits, want)
	}
}

// The queue's virtual clock moves with the claims: a lane that starts late
// takes turns with the lanes already waiting, it does not go first until
// it has caught up with them.
func TestALateLaneTakesTurnsWithTheWaitingOnes(t *testing.T) {
	f := newFixture(t)
	early := f.submitMany(t, "early", 3000, job.Submission{Kind: "noop"})
	log := &claimLog{tokens: map[string]fencing.Token{}}
	f.startWorker(t, execution.Config{Concurrency: 8, LeaseTTL: fairLease}, map[string]execution.Handler{"noop": log.handler})
	fence := keys.New(f.prefix).QueueFence(job.DefaultQueue)
	from := f.countFrom(t, fence)
	testenv.Eventually(t, 30*time.Second, func() bool {
		n, _ := f.rdb.Get(t.Context(), fence).Int64()
		return n-from >= 1000
	}, "the early lane never got going")

	before, err := f.rdb.Get(t.Context(), fence).Int64()
	if err != nil {
		t.Fatal(err)
	}
	late := f.submitMany(t, "late", 1000, job.Submission{Kind: "noop"})
	const window = 400
	testenv.Eventually(t, 30*time.Second, func() bool {
		n, _ := f.rdb.Get(t.Context(), fence).Int64()
		return n >= before+window
	}, "the queue stalled")

	inWindow := func(ids []string) (n int) {
		for _, id := range ids {
			if tok, ok := log.token(id); ok && int64(tok) > before && int64(tok) <= before+window {
				n++
			}
		}
		return n
	}
	e, l := inWindow(early), inWindow(late)
	t.Logf("of the %d claims after the late lane came: early %d, late %d", window, e, l)
	if e < window*2/5 {
		t.Fatalf("the early lane got %d of %d claims after the late one came: the late lane jumped ahead", e, window)
	}
}
