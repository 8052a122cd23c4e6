package execution_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasehold/leasehold/execution"
	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/internal/replicas"
	"github.com/leasehold/leasehold/internal/store/keys"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/job"
	"github.com/leasehold/leasehold/lease"
)

// A Redis that lost the queue's fence counter (a restart without its AOF
// tail, a failover to a replica that missed the claim) still gives a job's
// next execution a higher token: the counter is floored by the Redis clock.
// Deleting the counter is the worst such loss: without the floor, attempt
// 2 gets token 1.
//
// Fails when the claim issues tokens from the counter alone (fence.lua).
func TestTokenGrowsAfterTheQueueCounterIsLost(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	fence := keys.New(f.prefix).QueueFence(job.DefaultQueue)
	tokens := make(chan fencing.Token, 3)
	f.startWorker(t, execution.Config{}, map[string]execution.Handler{
		faultKind: func(ctx context.Context, e *execution.Execution) (any, error) {
			tokens <- e.Token()
			if e.Attempt() == 1 {
				if err := f.rdb.Del(ctx, fence).Err(); err != nil {
					return nil, execution.Permanent(err)
				}
				return nil, errBoom // retried
			}
			return "again", nil
		},
	})
	j := f.submit(t, job.Submission{Kind: faultKind, MaxAttempts: 2})
	done := f.waitState(t, j.ID, 10*time.Second, job.StateSucceeded, job.StateFailed)
	if done.State != job.StateSucceeded || done.Attempt != 2 {
		t.Fatalf("state %s attempt %d, want succeeded on attempt 2", done.State, done.Attempt)
	}
	first, second := <-tokens, <-tokens
	if second <= first || second >= 1<<53 {
		t.Fatalf("attempt 2 has token %d after the counter was lost, attempt 1 had %d: want above it and below 2^53", second, first)
	}
}

// Two executions of one job with equal tokens (what a counter that went
// back would issue) never both write: every write checks the execution id
// as well as the token. Here the job record is rewritten as another
// execution's claim with the running one's token; the running one's
// heartbeat, emit and finish are all refused, and the job stays the
// other's.
//
// Fails when the heartbeat (the handler is never stopped), the emit (its
// event lands) or the finish (the job ends) checks the token alone.
func TestAnotherExecutionWithTheSameTokenCannotWrite(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	type seen struct {
		e     *execution.Execution
		cause error
		emit  error
	}
	running := make(chan *execution.Execution, 1)
	stopped := make(chan seen, 1)
	// A lease far longer than the test: only a refused heartbeat, never the
	// trust window, can stop the handler.
	_, stop := f.startWorker(t, execution.Config{LeaseTTL: time.Minute}, map[string]execution.Handler{
		faultKind: func(ctx context.Context, e *execution.Execution) (any, error) {
			running <- e
			select {
			case <-ctx.Done():
			case <-time.After(20 * time.Second):
			}
			s := seen{e: e, cause: context.Cause(ctx)}
			s.emit = e.Emit(context.Background(), execution.EventProgress, map[string]string{"from": "the stale twin"})
			stopped <- s
			return "the stale twin's result", nil
		},
	})
	j := f.submit(t, job.Submission{Kind: faultKind, MaxAttempts: 3})
	e := <-running
	key := keys.New(f.prefix).Job(job.DefaultQueue, j.ID)
	const twin = "01a00000-0000-7000-8000-000000000000"
	if err := f.rdb.HSet(t.Context(), key, "exec_id", twin, "exec_worker", "twin").Err(); err != nil {
		t.Fatal(err)
	}
	s := <-stopped
	if !errors.Is(s.cause, lease.ErrLost) {
		t.Errorf("the stale execution's handler ended with %v, want lease.ErrLost from a refused heartbeat", s.cause)
	}
	if !errors.Is(s.emit, execution.ErrNotOwner) {
		t.Errorf("the stale execution's emit: %v, want ErrNotOwner", s.emit)
	}
	stop() // waits for the finish
	got := f.get(t, j.ID)
	if got.State != job.StateRunning || got.Execution.ID != twin || got.Execution.FencingToken != e.Token() || got.Result != nil {
		t.Fatalf("job %s under execution %s token %d result %s; want still running under %s with token %d",
			got.State, got.Execution.ID, got.Execution.FencingToken, got.Result, twin, e.Token())
	}
	for _, ev := range f.events(t, j.ID) {
		if ev.typ == execution.EventProgress {
			t.Fatalf("the stale execution's event landed: %+v", ev)
		}
	}
}

// With MIN_REPLICAS=1 a claim's leases are on the replica before its
// handler starts: while the replica is paused no handler starts (the
// claims are not confirmed), and once it follows again the job runs.
//
// Fails when the claim does not wait for replicas (replicas.Ack): the
// handler starts while the replica has not got the claim.
func TestClaimWaitsForItsReplicaBeforeTheHandlerStarts(t *testing.T) {
	t.Parallel()
	primary := testenv.StartRedis(t)
	replica := testenv.StartReplica(t, primary)
	rdb := primary.Client(t)
	if err := replicas.Require(rdb, 1, 200*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	f := newFixtureOn(t, rdb, testenv.NATS(t).Conn(t))
	if err := replica.Pause(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = replica.Resume() })
	ran := make(chan struct{}, 1)
	// The submit is not the API's: it does not wait.
	j := f.submit(t, job.Submission{Kind: faultKind})
	f.startWorker(t, execution.Config{}, map[string]execution.Handler{
		faultKind: func(context.Context, *execution.Execution) (any, error) { ran <- struct{}{}; return "ran", nil },
	})
	select {
	case <-ran:
		t.Fatal("a handler started while the replica had not confirmed its claim")
	case <-time.After(2 * time.Second): // ten claims' WAITs
	}
	if err := replica.Resume(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ran:
	case <-time.After(30 * time.Second):
		t.Fatal("the job never ran once the replica followed again")
	}
	f.waitState(t, j.ID, 30*time.Second, job.StateSucceeded)
}
