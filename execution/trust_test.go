package execution_test

import (
	"context"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/execution"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/job"
)

// slowClaim holds every run of the claim script for delay before sending
// it, alone or in a pipeline, while on: a worker paused between taking its
// candidates' key slots and the job. It counts the claims held.
type slowClaim struct {
	delay time.Duration
	on    *atomic.Bool
	held  *atomic.Int32
}

// claimRun reports whether cmd runs the claim script: its first key is a
// queue's ready set, and it has the claim's eight keys or more (the peek,
// whose first key is the ready set too, has five).
func claimRun(cmd redis.Cmder) bool {
	args := cmd.Args()
	if name := cmd.Name(); (name != "evalsha" && name != "eval") || len(args) < 4 {
		return false
	}
	n, _ := args[2].(int)
	key, _ := args[3].(string)
	return n >= 8 && strings.HasSuffix(key, ":ready")
}

func (h slowClaim) hold(cmds ...redis.Cmder) {
	if h.on.Load() && slices.ContainsFunc(cmds, claimRun) {
		time.Sleep(h.delay)
		h.held.Add(1)
	}
}

func (slowClaim) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h slowClaim) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.hold(cmd)
		return next(ctx, cmd)
	}
}

func (h slowClaim) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.hold(cmds...)
		return next(ctx, cmds)
	}
}

// A claim slower than the lease TTL never runs its handler: the trust
// window, counted from before the key slots were asked for, ended before
// the handler could start, and the slots may be someone else's by then.
// The job is handed back with its attempt unspent, and runs once claims
// are fast again.
func TestClaimSlowerThanTheTTLRunsNoHandler(t *testing.T) {
	t.Parallel()
	const ttl = 500 * time.Millisecond
	rdb := testenv.Redis(t).Client(t)
	slow := slowClaim{delay: 2 * ttl, on: new(atomic.Bool), held: new(atomic.Int32)}
	slow.on.Store(true)
	rdb.AddHook(slow)
	f := newFixtureOn(t, rdb, testenv.NATS(t).Conn(t))
	var ran atomic.Int32
	f.startWorker(t, execution.Config{Heartbeat: ttl / 3, LeaseTTL: ttl}, map[string]execution.Handler{
		faultKind: func(context.Context, *execution.Execution) (any, error) {
			ran.Add(1)
			return nil, nil
		},
	})
	j := f.submit(t, job.Submission{Kind: faultKind, MaxAttempts: 1})
	testenv.Eventually(t, 30*time.Second, func() bool { return slow.held.Load() >= 3 }, "the job was not claimed three times")
	slow.on.Store(false)
	done := f.waitState(t, j.ID, 30*time.Second, job.StateFailed, job.StateSucceeded)
	if done.State != job.StateSucceeded || done.Attempt != 1 {
		t.Fatalf("job ended %s on attempt %d (%+v), want succeeded on 1", done.State, done.Attempt, done.Error)
	}
	if n := ran.Load(); n != 1 {
		t.Fatalf("the handler ran %d times, want once: slow claims ran it", n)
	}
}

// slowLink delays every round trip of a client by delay, as a slow
// network or a loaded Redis would; a round trip whose context ends first
// fails with the context's error.
type slowLink struct{ delay time.Duration }

func (slowLink) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h slowLink) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if err := h.wait(ctx); err != nil {
			return err
		}
		return next(ctx, cmd)
	}
}

func (h slowLink) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if err := h.wait(ctx); err != nil {
			return err
		}
		return next(ctx, cmds)
	}
}

func (h slowLink) wait(ctx context.Context) error {
	select {
	case <-time.After(h.delay):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// A heartbeat slower than its interval, but well within the TTL, keeps
// its execution's lease: the handler runs for 1.5 TTLs, unstopped,
// and its job succeeds on its first attempt.
//
// Fails when a heartbeat times out after one interval: every heartbeat
// over this link then fails, and the handler is stopped as lost at the
// end of its first TTL.
func TestHeartbeatSlowerThanItsIntervalKeepsTheLease(t *testing.T) {
	t.Parallel()
	// A round trip takes 100ms, twice the heartbeat interval; a heartbeat
	// (two round trips) a tenth of the TTL, which leaves well over a
	// second for a loaded machine's own delays before a trust window
	// could end.
	const (
		ttl   = 2 * time.Second
		every = 50 * time.Millisecond
		delay = 100 * time.Millisecond
	)
	rdb := testenv.Redis(t).Client(t)
	rdb.AddHook(slowLink{delay: delay})
	f := newFixtureOn(t, rdb, testenv.NATS(t).Conn(t))
	stopped := make(chan error, 1)
	f.startWorker(t, execution.Config{Heartbeat: every, LeaseTTL: ttl}, map[string]execution.Handler{
		faultKind: func(ctx context.Context, _ *execution.Execution) (any, error) {
			select {
			case <-time.After(ttl + ttl/2): // past the TTL: only heartbeats keep it running that long
				return nil, nil
			case <-ctx.Done():
				stopped <- context.Cause(ctx)
				return nil, context.Cause(ctx)
			}
		},
	})
	j := f.submit(t, job.Submission{Kind: faultKind, MaxAttempts: 1})
	done := f.waitState(t, j.ID, 30*time.Second, job.StateSucceeded, job.StateFailed)
	select {
	case cause := <-stopped:
		t.Fatalf("the handler was stopped: %v", cause)
	default:
	}
	if done.State != job.StateSucceeded || done.Attempt != 1 {
		t.Fatalf("job ended %s on attempt %d (%+v), want succeeded on 1", done.State, done.Attempt, done.Error)
	}
}
