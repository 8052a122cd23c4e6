package execution_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasehold/leasehold/execution"
	"github.com/leasehold/leasehold/internal/store"
	"github.com/leasehold/leasehold/internal/store/keys"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/job"
	"github.com/leasehold/leasehold/lease"
)

// A claim takes its candidates' slots before the claim script, one key at
// a time. A candidate granted a slot of one key and refused one of another
// is not claimed, and the claim gives back the slot it got: a job that
// waits for a full key never holds a slot of a free one. Here job X needs
// model:a (free, limit 1) and model:b (held by someone else): every claim
// takes model:a's slot for X, then must give it back. Each grant counts in
// model:a's fencing counter (set above the clock: countFrom), so the test
// waits for ten of them, and checks
// all along that no slot of model:a goes unrenewed for a second (a slot
// taken by a claim lives the lease TTL, 3 s, unless given back).
//
// Fails when the claim keeps the slots of candidates it did not claim
// (reservation.unused): model:a's slot then stays taken for the TTL, and
// X's next claims, refused model:a, wait for it to expire.
func TestClaimsGiveBackSlotsTheyDoNotUse(t *testing.T) {
	t.Parallel()
	const (
		ttl   = 3 * time.Second
		stale = time.Second
	)
	f := newFixture(t)
	f.setLimit(t, "model:a", 1)
	f.setLimit(t, "model:b", 1)
	leases, err := lease.New(store.New(f.rdb, store.Config{Prefix: f.prefix}), lease.Config{})
	if err != nil {
		t.Fatal(err)
	}
	hog, err := leases.Acquire(t.Context(), "model:b", "hog", 1, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = leases.Release(context.Background(), hog) })
	ks := keys.New(f.prefix)
	from := f.countFrom(t, ks.LeaseFence("model:a"))
	x := f.submit(t, job.Submission{Kind: faultKind, ConcurrencyKeys: []string{"model:a", "model:b"}})
	f.startWorker(t, execution.Config{LeaseTTL: ttl, Heartbeat: 200 * time.Millisecond}, map[string]execution.Handler{faultKind: block})

	testenv.Eventually(t, 30*time.Second, func() bool {
		// Live slots of model:a that were taken or renewed more than stale ago.
		old, err := f.rdb.Eval(t.Context(), `
			local t = redis.call('TIME')
			local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
			return redis.call('ZRANGE', KEYS[1], '(' .. now, now + ARGV[1], 'BYSCORE')`,
			[]string{ks.LeaseSet("model:a")}, (ttl - stale).Milliseconds()).StringSlice()
		if err != nil {
			t.Fatal(err)
		}
		if len(old) > 0 {
			t.Fatalf("slots %v of model:a held for more than %v by a job that waits for model:b", old, stale)
		}
		grants, _ := f.rdb.Get(t.Context(), ks.LeaseFence("model:a")).Int64()
		return grants-from >= 10
	}, "the worker did not try to claim X ten times")
	if got := f.get(t, x.ID); got.State != job.StateQueued || got.Attempt != 0 {
		t.Fatalf("X is %s at attempt %d, want queued at 0: a refused claim spends nothing", got.State, got.Attempt)
	}
}

// An execution whose slot of a concurrency key is gone (removed from under
// it: a failover that lost the write, an operator) has lost its lease like
// one whose execution lease is gone, even though its execution lease is
// live: the slot may be someone else's now. Its handler is stopped with
// lease.ErrLost at the next heartbeat.
//
// Fails when the heartbeat ignores the slots lease_renew.lua reports gone.
func TestExecutionThatLosesItsKeySlotStops(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.setLimit(t, "model:a", 1)
	stopped := make(chan error, 1)
	f.startWorker(t, execution.Config{LeaseTTL: 10 * time.Second, Heartbeat: 100 * time.Millisecond}, map[string]execution.Handler{
		faultKind: func(ctx context.Context, e *execution.Execution) (any, error) {
			if e.Attempt() > 1 {
				return "again", nil
			}
			<-ctx.Done()
			stopped <- context.Cause(ctx)
			return nil, context.Cause(ctx)
		}})
	j := f.submit(t, job.Submission{Kind: faultKind, ConcurrencyKeys: []string{"model:a"}, MaxAttempts: 2})
	running := f.waitState(t, j.ID, 10*time.Second, job.StateRunning)
	set := keys.New(f.prefix).LeaseSet("model:a")
	if n, err := f.rdb.ZRem(t.Context(), set, running.Execution.ID).Result(); err != nil || n != 1 {
		t.Fatalf("remove the execution's slot: %d, %v", n, err)
	}
	select {
	case cause := <-stopped:
		if !errors.Is(cause, lease.ErrLost) {
			t.Fatalf("handler stopped with %v, want lease.ErrLost", cause)
		}
	case <-time.After(10 * time.Second): // within the 10s execution lease: only the slot can stop it
		t.Fatal("the handler runs on without its slot of model:a")
	}
	f.waitState(t, j.ID, 10*time.Second, job.StateSucceeded)
}

// A claim asks for slots of the keys of the lanes the last claim saw at the
// head in its first round trip, before it knows whether they still hold
// jobs (queue.askEarly). Slots no candidate used are given back at once.
// Here a worker with room for two claims jobs A and B, all its lane holds
// (it read as many as it asked for, so the lane may hold more); A blocks,
// B ends, and the next claim asks early for one slot of model:a (limit 3)
// and finds the lane empty. That slot must come back before its TTL runs
// out, so that model:a holds only A's.
//
// Fails when a claim that finds nothing to take keeps its early slots.
func TestEarlySlotsNoCandidateUsesAreGivenBack(t *testing.T) {
	t.Parallel()
	const ttl = 20 * time.Second
	f := newFixture(t)
	f.setLimit(t, "model:a", 3)
	ks := keys.New(f.prefix)
	from := f.countFrom(t, ks.LeaseFence("model:a"))
	a := f.submit(t, job.Submission{Kind: faultKind, ConcurrencyKeys: []string{"model:a"}})
	b := f.submit(t, job.Submission{Kind: faultKind, ConcurrencyKeys: []string{"model:a"}})
	f.startWorker(t, execution.Config{LeaseTTL: ttl, Concurrency: 2}, map[string]execution.Handler{
		faultKind: func(ctx context.Context, e *execution.Execution) (any, error) {
			if e.JobID == a.ID {
				return block(ctx, e)
			}
			return "done", nil
		}})
	f.waitState(t, b.ID, 10*time.Second, job.StateSucceeded)
	running := f.waitState(t, a.ID, 10*time.Second, job.StateRunning)

	testenv.Eventually(t, 10*time.Second, func() bool {
		grants, _ := f.rdb.Get(t.Context(), ks.LeaseFence("model:a")).Int64()
		return grants-from >= 3
	}, "no claim asked for model:a's slots after A's and B's")
	testenv.Eventually(t, ttl/2, func() bool {
		held, err := liveMembers(t.Context(), f.rdb, ks.LeaseSet("model:a"))
		if err != nil {
			t.Fatal(err)
		}
		return len(held) == 1 && held[0] == running.Execution.ID
	}, "model:a holds slots of executions that never ran")
}

// The early ask asks for no more slots for a lane than the jobs the last
// claim left there when it read them all: slots asked for jobs that are
// not there would be held, for nothing, from those who wait for them.
// Here a worker with room for four claims job A, the only job of its lane,
// then job C of another lane: no claim after A's asks for model:a again.
//
// Fails when askEarly ignores what the last claim left (left).
func TestEarlyAskStopsAtTheJobsALaneHas(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.setLimit(t, "model:a", 3)
	fence := keys.New(f.prefix).LeaseFence("model:a")
	from := f.countFrom(t, fence)
	a := f.submit(t, job.Submission{Kind: faultKind, ConcurrencyKeys: []string{"model:a"}})
	f.startWorker(t, execution.Config{Concurrency: 4}, map[string]execution.Handler{faultKind: block})
	f.waitState(t, a.ID, 10*time.Second, job.StateRunning)
	c := f.submit(t, job.Submission{Kind: faultKind, ConcurrencyKeys: []string{"model:c"}})
	f.waitState(t, c.ID, 10*time.Second, job.StateRunning)
	if n, err := f.rdb.Get(t.Context(), fence).Int64(); err != nil || n-from != 1 {
		t.Fatalf("model:a granted %d slots (%v), want 1: a claim asked for slots of a lane it had emptied", n-from, err)
	}
}
