package execution_test

import (
	"context"
	"testing"
	"time"

	"github.com/leasehold/leasehold/execution"
	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/internal/keys"
	"github.com/leasehold/leasehold/job"
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
