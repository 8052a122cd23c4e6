package execution_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/execution"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/job"
)

// slowClaim holds every claim script (its first key is a queue's ready
// set) for delay before sending it: a worker paused between taking its
// candidates' key slots and the job.
type slowClaim struct{ delay time.Duration }

func (slowClaim) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h slowClaim) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		args := cmd.Args()
		if name := cmd.Name(); (name == "evalsha" || name == "eval") && len(args) > 3 {
			if key, _ := args[3].(string); strings.HasSuffix(key, ":ready") {
				time.Sleep(h.delay)
			}
		}
		return next(ctx, cmd)
	}
}

func (slowClaim) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// A claim slower than the lease TTL never runs its handler: the trust
// window, counted from before the claim, ended before the handler could
// start, and the key slots taken first may be someone else's by then.
func TestClaimSlowerThanTheTTLRunsNoHandler(t *testing.T) {
	t.Parallel()
	const ttl = 300 * time.Millisecond
	rdb := testenv.Redis(t).Client(t)
	rdb.AddHook(slowClaim{delay: 2 * ttl})
	f := newFixtureOn(t, rdb, testenv.NATS(t).Conn(t))
	var ran atomic.Bool
	f.startWorker(t, execution.Config{Heartbeat: ttl / 3, LeaseTTL: ttl}, map[string]execution.Handler{
		faultKind: func(context.Context, *execution.Execution) (any, error) {
			ran.Store(true)
			return nil, nil
		},
	})
	j := f.submit(t, job.Submission{Kind: faultKind, MaxAttempts: 1})
	done := f.waitState(t, j.ID, 30*time.Second, job.StateFailed, job.StateSucceeded)
	if ran.Load() {
		t.Fatal("the handler ran after its trust window ended")
	}
	if done.State != job.StateFailed || done.Error == nil || done.Error.Code != job.CodeLeaseLost {
		t.Fatalf("job ended %s with %+v, want failed with lease_lost", done.State, done.Error)
	}
}
