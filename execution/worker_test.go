package execution_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/leasehold/leasehold/internal/store"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/leasehold/leasehold/cancel"
	"github.com/leasehold/leasehold/execution"
	"github.com/leasehold/leasehold/internal/store/keys"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/internal/testsignal"
	"github.com/leasehold/leasehold/job"
)

func TestMain(m *testing.M) {
	testenv.Main(m, helpers)
}

func TestJobSucceedsWithResult(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.startWorker(t, execution.Config{}, map[string]execution.Handler{"echo": echo})
	j := f.submit(t, job.Submission{Kind: "echo", Input: raw(`{"say":"hi"}`)})
	done := f.waitState(t, j.ID, 10*time.Second, job.StateSucceeded)
	if string(done.Result) != `{"say":"hi"}` || done.Attempt != 1 || done.Error != nil {
		t.Fatalf("result %s, attempt %d, error %v", done.Result, done.Attempt, done.Error)
	}
	if done.Execution == nil || done.Execution.FencingToken == 0 || done.Execution.FinishedAt == nil {
		t.Fatalf("execution %+v", done.Execution)
	}
	if done.FinishedAt == nil || done.StartedAt == nil {
		t.Fatal("started_at and finished_at must be set")
	}
}

func TestRetriesWithBackoffThenSucceeds(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	var mu sync.Mutex
	var tokens []uint64
	f.startWorker(t, execution.Config{}, map[string]execution.Handler{
		"flaky": func(_ context.Context, e *execution.Execution) (any, error) {
			mu.Lock()
			tokens = append(tokens, uint64(e.Token()))
			mu.Unlock()
			if e.Attempt() < 3 {
				return nil, errBoom
			}
			return "ok", nil
		},
	})
	j := f.submit(t, job.Submission{Kind: "flaky", MaxAttempts: 3})
	done := f.waitState(t, j.ID, 10*time.Second, job.StateSucceeded, job.StateFailed)
	if done.State != job.StateSucceeded || done.Attempt != 3 {
		t.Fatalf("state %s attempt %d, want succeeded on attempt 3", done.State, done.Attempt)
	}
	mu.Lock()
	defer mu.Unlock()
	for i := 1; i < len(tokens); i++ {
		if tokens[i] <= tokens[i-1] {
			t.Fatalf("tokens %v do not grow across attempts", tokens)
		}
	}
}

func TestFailsAfterMaxAttempts(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.startWorker(t, execution.Config{}, map[string]execution.Handler{
		"bad": func(context.Context, *execution.Execution) (any, error) { return nil, errBoom },
	})
	j := f.submit(t, job.Submission{Kind: "bad", MaxAttempts: 2})
	done := f.waitState(t, j.ID, 10*time.Second, job.StateFailed)
	if done.Attempt != 2 || errCode(done) != job.CodeHandlerError || done.Error.Message != "boom" {
		t.Fatalf("attempt %d error %+v", done.Attempt, done.Error)
	}
}

func TestPermanentErrorIsNotRetried(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.startWorker(t, execution.Config{}, map[string]execution.Handler{
		"bad": func(context.Context, *execution.Execution) (any, error) {
			return nil, execution.Permanent(errors.New("invalid prompt"))
		},
	})
	j := f.submit(t, job.Submission{Kind: "bad", MaxAttempts: 5})
	done := f.waitState(t, j.ID, 10*time.Second, job.StateFailed)
	if done.Attempt != 1 {
		t.Fatalf("attempt %d, want 1: a permanent error is not retried", done.Attempt)
	}
}

func TestPanicFailsTheAttempt(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.startWorker(t, execution.Config{}, map[string]execution.Handler{
		"panics": func(context.Context, *execution.Execution) (any, error) { panic("oops") },
	})
	j := f.submit(t, job.Submission{Kind: "panics", MaxAttempts: 1})
	done := f.waitState(t, j.ID, 10*time.Second, job.StateFailed)
	if errCode(done) != job.CodeHandlerError {
		t.Fatalf("error %+v", done.Error)
	}
}

func TestTimeoutCancelsHandlerWithDeadlineExceeded(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	causes := make(chan error, 1)
	f.startWorker(t, execution.Config{}, map[string]execution.Handler{
		"slow": func(ctx context.Context, e *execution.Execution) (any, error) {
			<-ctx.Done()
			select {
			case causes <- context.Cause(ctx):
			default: // a second attempt, which must not happen: waitState fails the test
			}
			return nil, ctx.Err()
		},
	})
	j := f.submit(t, job.Submission{Kind: "slow", MaxAttempts: 1, Timeout: job.Duration(100 * time.Millisecond)})
	done := f.waitState(t, j.ID, 10*time.Second, job.StateFailed)
	if errCode(done) != job.CodeTimeout {
		t.Fatalf("error %+v, want timeout", done.Error)
	}
	if cause := <-causes; !errors.Is(cause, context.DeadlineExceeded) {
		t.Fatalf("handler saw cause %v", cause)
	}
}

func TestDelayedJobWaitsForItsTime(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ran := make(chan time.Time, 1)
	f.startWorker(t, execution.Config{}, map[string]execution.Handler{
		"later": func(context.Context, *execution.Execution) (any, error) { ran <- time.Now(); return nil, nil },
	})
	submitted := time.Now()
	j := f.submit(t, job.Submission{Kind: "later", Delay: job.Duration(400 * time.Millisecond)})
	f.waitState(t, j.ID, 10*time.Second, job.StateSucceeded)
	if at := <-ran; at.Sub(submitted) < 400*time.Millisecond {
		t.Fatalf("ran %v after submission, before its delay", at.Sub(submitted))
	}
}

func TestPriorityThenFIFO(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	var ids []string
	for _, p := range []int{0, 0, 10, -5, 10} {
		ids = append(ids, f.submit(t, job.Submission{Kind: "order", Priority: p}).ID)
	}
	order := runInOrder(t, f)
	for _, id := range ids {
		f.waitState(t, id, 10*time.Second, job.StateSucceeded)
	}
	if want := []string{ids[2], ids[4], ids[0], ids[1], ids[3]}; !slices.Equal(order(), want) {
		t.Fatalf("ran in order %v, want %v", order(), want)
	}
}

// runInOrder starts a worker that runs "order" jobs one at a time, and
// returns what it has run so far, in order.
func runInOrder(t *testing.T, f *fixture) (order func() []string) {
	var mu sync.Mutex
	var ran []string
	f.startWorker(t, execution.Config{Concurrency: 1}, map[string]execution.Handler{
		"order": func(_ context.Context, e *execution.Execution) (any, error) {
			mu.Lock()
			ran = append(ran, e.JobID)
			mu.Unlock()
			return nil, nil
		},
	})
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(ran)
	}
}

// A delayed job that comes due joins its lane in its priority's band: it
// runs before a job of lower priority that has waited all along.
func TestDueJobKeepsItsPriority(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	const delay = 300 * time.Millisecond
	low := f.submit(t, job.Submission{Kind: "order"})
	high := f.submit(t, job.Submission{Kind: "order", Priority: 10, Delay: job.Duration(delay)})
	time.Sleep(time.Until(high.CreatedAt.Add(delay))) // both wait, high in the schedule, until it is due
	order := runInOrder(t, f)
	f.waitState(t, low.ID, 10*time.Second, job.StateSucceeded)
	f.waitState(t, high.ID, 10*time.Second, job.StateSucceeded)
	if want := []string{high.ID, low.ID}; !slices.Equal(order(), want) {
		t.Fatalf("ran in order %v, want %v (the due job has the higher priority)", order(), want)
	}
}

// A retry's execution shows no end until it has one: the claim clears what
// the last execution left.
func TestRetriedExecutionIsNotFinishedWhileItRuns(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	release := make(chan struct{})
	retryAtOnce := func(int) time.Duration { return 10 * time.Millisecond }
	// The second attempt must run until the test has read it. Under the
	// fixture's 500 ms TTL, a claim slowed by a loaded machine left it
	// little trust, it ended as lost before the test could see it run, and
	// the test waited for it in vain; 5 s covers such a claim.
	cfg := execution.Config{Backoff: retryAtOnce, LeaseTTL: 5 * time.Second}
	f.startWorker(t, cfg, map[string]execution.Handler{
		"flaky": func(ctx context.Context, e *execution.Execution) (any, error) {
			if e.Attempt() == 1 {
				return nil, errors.New("first attempt fails")
			}
			select {
			case <-release:
			case <-ctx.Done():
			}
			return nil, nil
		},
	})
	j := f.submit(t, job.Submission{Kind: "flaky", MaxAttempts: 2})
	testenv.Eventually(t, 10*time.Second, func() bool {
		j = f.get(t, j.ID)
		return j.State == job.StateRunning && j.Execution != nil && j.Execution.Attempt == 2
	}, "the second attempt never started")
	if j.Execution.FinishedAt != nil {
		t.Errorf("the running second attempt shows finished_at %v (the first attempt's end)", j.Execution.FinishedAt)
	}
	close(release)
	f.waitState(t, j.ID, 10*time.Second, job.StateSucceeded)
}

func TestCancelQueuedJobNeverRuns(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	j := f.submit(t, job.Submission{Kind: "never"})
	if got := f.cancelJob(t, j.ID); got.State != job.StateCancelled {
		t.Fatalf("state %s after cancel, want cancelled", got.State)
	}
	ran := make(chan struct{}, 1)
	f.startWorker(t, execution.Config{}, map[string]execution.Handler{
		"never": func(context.Context, *execution.Execution) (any, error) { ran <- struct{}{}; return nil, nil },
		"echo":  echo,
	})
	// A later job runs, so the worker has looked at the queue.
	f.waitState(t, f.submit(t, job.Submission{Kind: "echo"}).ID, 10*time.Second, job.StateSucceeded)
	select {
	case <-ran:
		t.Fatal("a cancelled job ran")
	default:
	}
}

// TestTerminalJobsAreDeletedAfterRetention: jobs that succeeded, failed
// or were cancelled while waiting stay readable for their retention, then
// the worker's reaper deletes their record, events and index entries.
//
// Fails when terminal jobs are not retired, when the reaper does not
// delete them, or when it deletes them before their retention ends.
func TestTerminalJobsAreDeletedAfterRetention(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	const retention = 300 * time.Millisecond
	store := store.New(f.rdb, store.Config{Prefix: f.prefix, Retention: retention, IdempotencyTTL: retention})
	f.startWorker(t, execution.Config{Retention: retention}, map[string]execution.Handler{
		"echo": echo,
		"fail": func(context.Context, *execution.Execution) (any, error) { return nil, execution.Permanent(errBoom) },
	})
	ended := map[string]time.Time{}
	for _, s := range []job.Submission{{Kind: "echo"}, {Kind: "fail"}} {
		j := f.submit(t, s)
		ended[j.ID] = *f.waitState(t, j.ID, 10*time.Second, job.StateSucceeded, job.StateFailed).FinishedAt
	}
	waiting := f.submit(t, job.Submission{Kind: "echo", Delay: job.Duration(time.Hour)})
	cancelled, err := store.Cancel(t.Context(), "acme", waiting.ID, false)
	if err != nil || cancelled.State != job.StateCancelled {
		t.Fatalf("cancel: %+v, %v", cancelled, err)
	}
	ended[waiting.ID] = *cancelled.FinishedAt

	ks := keys.New(f.prefix)
	for id, at := range ended {
		testenv.Eventually(t, 10*time.Second, func() bool {
			return f.rdb.Exists(t.Context(), ks.Job(job.DefaultQueue, id), ks.JobEvents(job.DefaultQueue, id)).Val() == 0
		}, "job %s and its events were never deleted", id)
		if now := time.Now(); now.Before(at.Add(retention)) {
			t.Errorf("job %s deleted %v after it ended, before its %v retention", id, now.Sub(at), retention)
		}
		if _, err := f.store.Get(t.Context(), "acme", id, false); !errors.Is(err, job.ErrNotFound) {
			t.Errorf("get of a deleted job: %v, want ErrNotFound", err)
		}
	}
	if n := f.rdb.ZCard(t.Context(), ks.QueueRetired(job.DefaultQueue)).Val(); n != 0 {
		t.Errorf("%d jobs still retired after their deletion", n)
	}
	// The listing indexes lose them too, with no listing to meet them.
	if left := f.rdb.ZRange(t.Context(), ks.QueueTenantJobs(job.DefaultQueue, "acme"), 0, -1).Val(); len(left) != 0 {
		t.Errorf("the tenant's index still lists deleted jobs %v", left)
	}
}

// TestWorkerOnRedisCluster runs jobs of two queues (two hash slots) on a
// Redis Cluster: batched claims and finishes, a limited key, retries and
// the deletion of retired jobs. Every script must take each key it touches
// through KEYS, in its queue's slot, or the cluster refuses it.
//
// The jobs whose success it checks one by one run under the default
// retention: a job deleted before the test reads it could not be told
// from one that never succeeded (under load, jobs ahead in the test's
// order, such as those of the limited key, can take seconds longer than
// the ones behind). The deletion is then checked on jobs run by a second
// worker with a short retention.
func TestWorkerOnRedisCluster(t *testing.T) {
	t.Parallel()
	f := newFixtureOn(t, testenv.Cluster(t).Client(t), testenv.NATS(t).Conn(t))
	f.setLimit(t, "model:a", 2)
	queues := []string{"default", "other"}
	handlers := map[string]execution.Handler{
		"echo": echo,
		"flaky": func(_ context.Context, e *execution.Execution) (any, error) {
			if e.Attempt() == 1 {
				return nil, errBoom
			}
			return "ok", nil
		},
	}
	// submit sends n jobs over both queues: echo, echo on the limited
	// key, and flaky (it fails its first attempt), in turn.
	submit := func(n int) (ids []string) {
		for i := range n {
			s := job.Submission{Kind: "echo", Queue: queues[i%2]}
			switch i % 3 {
			case 1:
				s.ConcurrencyKeys = []string{"model:a"}
			case 2:
				s.Kind = "flaky"
			}
			ids = append(ids, f.submit(t, s).ID)
		}
		return ids
	}

	_, stop := f.startWorker(t, execution.Config{Queues: queues, Concurrency: 16}, handlers)
	for _, id := range submit(30) {
		f.waitState(t, id, 20*time.Second, job.StateSucceeded)
	}
	stop()

	const retention = 300 * time.Millisecond
	f.startWorker(t, execution.Config{Queues: queues, Concurrency: 16, Retention: retention}, handlers)
	ks := keys.New(f.prefix)
	for i, id := range submit(6) {
		q := queues[i%2]
		testenv.Eventually(t, 20*time.Second, func() bool {
			return f.rdb.Exists(t.Context(), ks.Job(q, id)).Val() == 0 && f.rdb.Exists(t.Context(), ks.JobEvents(q, id)).Val() == 0
		}, "job %s was never deleted after its retention", id)
	}
}

func TestCancelRunningJobStopsHandler(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	started := make(chan struct{}, 1)
	causes := make(chan error, 1)
	// Long heartbeats: only NATS can be this fast.
	f.startWorker(t, execution.Config{Heartbeat: time.Minute, LeaseTTL: 3 * time.Minute}, map[string]execution.Handler{
		"long": func(ctx context.Context, e *execution.Execution) (any, error) {
			started <- struct{}{}
			<-ctx.Done()
			causes <- context.Cause(ctx)
			return nil, ctx.Err()
		},
	})
	j := f.submit(t, job.Submission{Kind: "long", MaxAttempts: 3})
	<-started
	f.waitState(t, j.ID, 10*time.Second, job.StateRunning)
	requested := time.Now()
	f.cancelJob(t, j.ID)
	select {
	case cause := <-causes:
		if !errors.Is(cause, cancel.ErrRequested) {
			t.Fatalf("handler saw cause %v, want cancel.ErrRequested", cause)
		}
		t.Logf("handler saw the cancel %v after the request (NATS)", time.Since(requested))
	case <-time.After(10 * time.Second):
		t.Fatal("the handler never saw the cancel")
	}
	done := f.waitState(t, j.ID, 10*time.Second, job.StateCancelled)
	if done.Attempt != 1 || errCode(done) != job.CodeCancelled {
		t.Fatalf("attempt %d error %+v: a cancelled job is not retried", done.Attempt, done.Error)
	}
}

// A cancel's flag that lands after the job it stopped was retried (the
// API writes the record, then the flag) does not stop the retried run:
// the record, without cancel_requested, is the truth. Another job's cancel
// sent after the late flag, over the same NATS connection, is seen, so
// the late flag has been read by then.
func TestLateCancelFlagDoesNotStopARetriedJob(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	release := make(chan struct{})
	// Long heartbeats: only the watcher's flag reads can stop the job.
	f.startWorker(t, execution.Config{Heartbeat: time.Minute, LeaseTTL: 3 * time.Minute}, map[string]execution.Handler{
		"long": func(ctx context.Context, e *execution.Execution) (any, error) {
			select {
			case <-ctx.Done():
				return nil, context.Cause(ctx)
			case <-release:
				return "done", nil
			}
		},
	})
	a := f.submit(t, job.Submission{Kind: "long"})
	f.waitState(t, a.ID, 10*time.Second, job.StateRunning)
	f.cancelJob(t, a.ID)
	f.waitState(t, a.ID, 10*time.Second, job.StateCancelled)
	if _, err := f.store.Retry(t.Context(), "acme", a.ID, false); err != nil {
		t.Fatal(err)
	}
	f.waitState(t, a.ID, 10*time.Second, job.StateRunning)
	if err := f.flags.Request(t.Context(), a.ID, time.Hour); err != nil { // the first cancel's flag, late
		t.Fatal(err)
	}
	b := f.submit(t, job.Submission{Kind: "long"})
	f.waitState(t, b.ID, 10*time.Second, job.StateRunning)
	f.cancelJob(t, b.ID)
	f.waitState(t, b.ID, 10*time.Second, job.StateCancelled)
	if got := f.get(t, a.ID); got.State != job.StateRunning {
		t.Fatalf("the retried job is %s (error %+v), want running: a late flag stopped it", got.State, got.Error)
	}
	close(release)
	f.waitState(t, a.ID, 10*time.Second, job.StateSucceeded)
}

func TestCancelRunningJobWithNATSDownIsFoundByHeartbeat(t *testing.T) {
	t.Parallel()
	srv := testenv.StartNATS(t)
	f := newFixtureOn(t, testenv.Redis(t).Client(t), srv.Conn(t))
	started := make(chan struct{}, 1)
	f.startWorker(t, execution.Config{Heartbeat: 100 * time.Millisecond, LeaseTTL: time.Second}, map[string]execution.Handler{
		"long": func(ctx context.Context, e *execution.Execution) (any, error) {
			started <- struct{}{}
			return block(ctx, e)
		},
	})
	j := f.submit(t, job.Submission{Kind: "long"})
	<-started
	srv.Stop(t)
	f.cancelJob(t, j.ID) // the flag and the job state are written; the message is lost
	done := f.waitState(t, j.ID, 10*time.Second, job.StateCancelled)
	if done.Attempt != 1 {
		t.Fatalf("attempt %d: a cancelled job is not retried", done.Attempt)
	}
}

func TestEmitIsFencedAfterTheJobEnds(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	kept := make(chan *execution.Execution, 1)
	f.startWorker(t, execution.Config{}, map[string]execution.Handler{
		"emits": func(ctx context.Context, e *execution.Execution) (any, error) {
			if err := e.Emit(ctx, execution.EventProgress, map[string]int{"step": 1}); err != nil {
				return nil, err
			}
			kept <- e
			return nil, nil
		},
	})
	j := f.submit(t, job.Submission{Kind: "emits"})
	f.waitState(t, j.ID, 10*time.Second, job.StateSucceeded)
	e := <-kept
	if err := e.Emit(t.Context(), execution.EventLog, "too late"); !errors.Is(err, execution.ErrNotOwner) {
		t.Fatalf("emit after the end: %v, want ErrNotOwner", err)
	}
	events, err := f.store.Events(t.Context(), "acme", j.ID, false, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, ev := range events {
		types = append(types, ev.Type)
	}
	want := []string{"state", "state", "progress", "state"} // queued, running, progress, succeeded
	if len(types) != len(want) {
		t.Fatalf("events %v, want %v", types, want)
	}
}

func TestIdleWorkerPicksUpWokenJobAtOnce(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	idle := testsignal.New()
	f.startWorker(t, execution.WithIdleSignal(execution.Config{Poll: time.Hour}, idle), map[string]execution.Handler{"echo": echo})
	// Only once the worker has found the queue empty and gone idle: a job
	// submitted before would be found by its first claim, and the test
	// would prove nothing about the wake-up.
	idle.Wait(t, 10*time.Second)
	submitted := time.Now()
	j := f.submit(t, job.Submission{Kind: "echo"})
	if err := execution.Wake(f.nc, f.prefix, job.DefaultQueue); err != nil {
		t.Fatal(err)
	}
	f.waitState(t, j.ID, 10*time.Second, job.StateSucceeded)
	t.Logf("idle pickup to success: %v", time.Since(submitted))
}

func TestGracefulShutdownHandsBackWithoutSpendingAnAttempt(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	started := make(chan struct{}, 1)
	causes := make(chan error, 1)
	_, stopA := f.startWorker(t, execution.Config{ShutdownGrace: 100 * time.Millisecond}, map[string]execution.Handler{
		"long": func(ctx context.Context, e *execution.Execution) (any, error) {
			started <- struct{}{}
			<-ctx.Done()
			causes <- context.Cause(ctx)
			return nil, ctx.Err()
		},
	})
	j := f.submit(t, job.Submission{Kind: "long", MaxAttempts: 1})
	<-started
	stopA()
	if cause := <-causes; !errors.Is(cause, execution.ErrShutdown) {
		t.Fatalf("handler saw cause %v, want ErrShutdown", cause)
	}
	back := f.get(t, j.ID)
	if back.State != job.StateQueued || back.Attempt != 1 {
		t.Fatalf("after hand-off: state %s attempt %d, want queued with attempt 1, unspent", back.State, back.Attempt)
	}
	if n, _ := f.rdb.ZCard(t.Context(), keys.New(f.prefix).QueueLeases(job.DefaultQueue)).Result(); n != 0 {
		t.Fatalf("%d leases left after a graceful hand-off", n)
	}
	f.startWorker(t, execution.Config{}, map[string]execution.Handler{"long": echo})
	done := f.waitState(t, j.ID, 10*time.Second, job.StateSucceeded, job.StateFailed)
	if done.State != job.StateSucceeded || done.Attempt != 1 {
		t.Fatalf("state %s attempt %d: a max_attempts 1 job must still succeed after a hand-off", done.State, done.Attempt)
	}
	// Attempt numbers never go back: the hand-off keeps attempt 1, and the
	// next execution runs on it.
	f.checkAttempts(t, j.ID, []job.State{job.StateQueued, job.StateRunning, job.StateQueued, job.StateRunning,
		job.StateSucceeded}, []int{0, 1, 1, 1, 1})
}

// HandBack cuts the shutdown grace short: Run returns at once, long before
// its grace of an hour, with the running job handed back to its queue.
func TestHandBackEndsTheGraceAtOnce(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	started := make(chan struct{}, 1)
	w, stop := f.startWorker(t, execution.Config{ShutdownGrace: time.Hour}, map[string]execution.Handler{
		"long": func(ctx context.Context, e *execution.Execution) (any, error) {
			started <- struct{}{}
			<-ctx.Done()
			return nil, ctx.Err()
		},
	})
	j := f.submit(t, job.Submission{Kind: "long"})
	<-started
	if n := w.Running(); n != 1 {
		t.Fatalf("Running() = %d with one handler running, want 1", n)
	}
	stopped := make(chan struct{})
	go func() { stop(); close(stopped) }()
	w.HandBack()
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("Run still waits out its grace 10s after HandBack")
	}
	// A hand-off spends no attempt, and the attempt number stays.
	if back := f.get(t, j.ID); back.State != job.StateQueued || back.Attempt != 1 {
		t.Fatalf("after HandBack: state %s attempt %d, want queued with attempt 1", back.State, back.Attempt)
	}
	if n := w.Running(); n != 0 {
		t.Fatalf("Running() = %d after Run returned", n)
	}
}

// Executions run on runners that stay for the next one (see Worker.start).
// Through many more jobs than slots, no more than Concurrency handlers run
// at any moment, every slot is used, and every job ends; Run then returns
// with every runner gone (TestMain fails on a leaked goroutine).
func TestHandlersRunAtMostConcurrencyAtOnce(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	const jobs, concurrency = 200, 4
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	var mu sync.Mutex
	running, most := 0, 0
	full := make(chan struct{}) // the first handlers wait for it
	_, stop := f.startWorker(t, execution.Config{Concurrency: concurrency, MeterProvider: mp}, map[string]execution.Handler{
		"count": func(context.Context, *execution.Execution) (any, error) {
			mu.Lock()
			running++
			most = max(most, running)
			mu.Unlock()
			<-full
			mu.Lock()
			running--
			mu.Unlock()
			return nil, nil
		},
	})
	ids := f.submitMany(t, "acme", jobs, job.Submission{Kind: "count"})
	testenv.Eventually(t, 10*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return running >= concurrency
	}, "the handlers never filled the slots")
	// While they hold every slot, a heartbeat renews their leases: the
	// worker has had the time to start more handlers, if it would.
	testenv.Eventually(t, 10*time.Second, func() bool {
		h, ok := find(collect(t, reader), "leasehold.worker.heartbeat.lag").(metricdata.Histogram[float64])
		return ok && h.DataPoints[0].Count >= concurrency
	}, "no heartbeat renewed the running leases")
	close(full)
	for _, id := range ids {
		f.waitState(t, id, 30*time.Second, job.StateSucceeded)
	}
	stop()
	mu.Lock()
	defer mu.Unlock()
	if most != concurrency {
		t.Fatalf("%d handlers ran at once, want %d", most, concurrency)
	}
}

// Run may be called again once it has returned: its runners are its own.
func TestRunAgainAfterItReturned(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	w, err := execution.NewWorker(f.rdb, f.config(execution.Config{Concurrency: 1}))
	if err != nil {
		t.Fatal(err)
	}
	w.Handle("echo", echo)
	for range 2 {
		ctx, stop := context.WithCancel(context.Background())
		ran := make(chan error, 1)
		go func() { ran <- w.Run(ctx) }()
		// More jobs than runners: the runner takes the next.
		for range 2 {
			f.waitState(t, f.submit(t, job.Submission{Kind: "echo"}).ID, 10*time.Second, job.StateSucceeded)
		}
		stop()
		if err := <-ran; err != nil {
			t.Fatalf("Run: %v", err)
		}
	}
}

func TestRetryAfterIsTheLeastWaitBeforeTheRetry(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	const after = 1500 * time.Millisecond
	var mu sync.Mutex
	var starts []time.Time
	f.startWorker(t, execution.Config{}, map[string]execution.Handler{
		"busy": func(_ context.Context, e *execution.Execution) (any, error) {
			mu.Lock()
			starts = append(starts, time.Now())
			mu.Unlock()
			if e.Attempt() == 1 {
				return nil, execution.RetryAfter(errors.New("upstream busy"), after)
			}
			return "ok", nil
		},
	})
	j := f.submit(t, job.Submission{Kind: "busy", MaxAttempts: 2})
	done := f.waitState(t, j.ID, 10*time.Second, job.StateSucceeded, job.StateFailed)
	if done.State != job.StateSucceeded {
		t.Fatalf("state %s error %+v", done.State, done.Error)
	}
	mu.Lock()
	defer mu.Unlock()
	// The backoff is 10ms: only the Retry-After explains a longer wait.
	if gap := starts[1].Sub(starts[0]); gap < after {
		t.Fatalf("retried %v after the first attempt started, want at least %v", gap, after)
	}
}

func TestEmitPastMaxEventsFailsTheJobWithoutRetry(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	emitErr := make(chan error, 1)
	f.startWorker(t, execution.Config{MaxEvents: 3}, map[string]execution.Handler{
		"chatty": func(ctx context.Context, e *execution.Execution) (any, error) {
			for i := 0; ; i++ {
				if err := e.Emit(ctx, execution.EventProgress, map[string]int{"i": i}); err != nil {
					emitErr <- err
					return nil, err
				}
			}
		},
	})
	j := f.submit(t, job.Submission{Kind: "chatty", MaxAttempts: 3})
	done := f.waitState(t, j.ID, 10*time.Second, job.StateFailed)
	if err := <-emitErr; !errors.Is(err, execution.ErrTooManyEvents) || !strings.Contains(err.Error(), "3 events") {
		t.Fatalf("emit error %v, want ErrTooManyEvents naming the cap", err)
	}
	if done.Attempt != 1 {
		t.Fatalf("attempt %d, want 1: a flood is not retried", done.Attempt)
	}
	events, err := f.store.Events(t.Context(), "acme", j.ID, false, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	progress := 0
	for _, ev := range events {
		if ev.Type == execution.EventProgress {
			progress++
		}
	}
	if progress != 3 {
		t.Fatalf("%d progress events written, want the cap, 3", progress)
	}
}

// An event's data is capped in bytes: a larger one is refused, written
// nowhere, and fails the job without a retry when the handler returns it.
func TestEmitOverMaxEventBytesIsRefused(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	emitErr := make(chan error, 1)
	f.startWorker(t, execution.Config{}, map[string]execution.Handler{
		"loud": func(ctx context.Context, e *execution.Execution) (any, error) {
			if err := e.Emit(ctx, execution.EventLog, map[string]string{"line": "ok"}); err != nil {
				return nil, err
			}
			err := e.Emit(ctx, execution.EventLog, map[string]string{"line": strings.Repeat("x", execution.MaxEventBytes)})
			emitErr <- err
			return nil, err
		},
	})
	j := f.submit(t, job.Submission{Kind: "loud", MaxAttempts: 3})
	done := f.waitState(t, j.ID, 10*time.Second, job.StateFailed)
	if err := <-emitErr; !errors.Is(err, execution.ErrEventTooLarge) {
		t.Fatalf("emit error %v, want ErrEventTooLarge", err)
	}
	if done.Attempt != 1 {
		t.Errorf("attempt %d, want 1: an oversized event is not retried", done.Attempt)
	}
	events, err := f.store.Events(t.Context(), "acme", j.ID, false, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range events {
		if len(ev.Data) > execution.MaxEventBytes {
			t.Errorf("a %s event of %d bytes was written", ev.Type, len(ev.Data))
		}
	}
}

// A handler's error of any size becomes a job error message of at most
// MaxErrorMessage bytes, valid UTF-8, in the job and in its state events.
func TestAHandlersErrorMessageIsCut(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	huge := strings.Repeat("é", 300_000) // 600 000 bytes, a cut inside a character would break it
	f.startWorker(t, execution.Config{}, map[string]execution.Handler{
		"verbose": func(context.Context, *execution.Execution) (any, error) { return nil, errors.New(huge) },
		"panicky": func(context.Context, *execution.Execution) (any, error) { panic(huge) },
	})
	for _, kind := range []string{"verbose", "panicky"} {
		j := f.submit(t, job.Submission{Kind: kind, MaxAttempts: 1})
		done := f.waitState(t, j.ID, 10*time.Second, job.StateFailed)
		if done.Error == nil {
			t.Fatalf("%s: no error", kind)
		}
		msg := done.Error.Message
		if len(msg) > execution.MaxErrorMessage || !utf8.ValidString(msg) || !strings.HasSuffix(msg, "bytes cut)") || !strings.Contains(msg, "éé") {
			t.Errorf("%s: a message of %d bytes (valid UTF-8: %v), ending %q", kind, len(msg), utf8.ValidString(msg), msg[max(0, len(msg)-40):])
		}
		events, err := f.store.Events(t.Context(), "acme", j.ID, false, "", 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range events {
			if len(ev.Data) > 2*execution.MaxErrorMessage {
				t.Errorf("%s: a %s event of %d bytes", kind, ev.Type, len(ev.Data))
			}
		}
	}
}

// A handler that succeeds after its job's cancel was acknowledged (202)
// does not make the job succeed: the cancel wins, as API.md says.
func TestSuccessAfterAnAcknowledgedCancelEndsCancelled(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	requested, release := make(chan string), make(chan struct{})
	_, stop := f.startWorker(t, execution.Config{}, map[string]execution.Handler{
		"stubborn": func(ctx context.Context, e *execution.Execution) (any, error) {
			requested <- e.JobID
			<-release // it ignores its context: the work was done anyway
			return map[string]bool{"done": true}, nil
		},
	})
	defer stop()
	j := f.submit(t, job.Submission{Kind: "stubborn"})
	<-requested
	if got := f.cancelJob(t, j.ID); !got.CancelRequested {
		t.Fatalf("cancel: %+v", got)
	}
	close(release)
	done := f.waitState(t, j.ID, 10*time.Second, job.StateSucceeded, job.StateCancelled, job.StateFailed)
	if done.State != job.StateCancelled || done.Result != nil || done.Error == nil || done.Error.Code != "cancelled" {
		t.Errorf("job ended %s, result %s, error %+v; want cancelled", done.State, done.Result, done.Error)
	}
}

// A worker's id goes into state events as it is: one that JSON would have
// to escape is refused, and the default one, from the host name, passes.
func TestWorkerIDIsChecked(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	for _, id := range []string{`w"1`, `w\1`, "w 1", "w\n1", "wörker", strings.Repeat("w", 129)} {
		if _, err := execution.NewWorker(f.rdb, f.config(execution.Config{ID: id})); err == nil {
			t.Errorf("worker id %q accepted", id)
		}
	}
	for _, id := range []string{"", "worker-1.example.com:8080@eu_west", strings.Repeat("w", 128)} {
		w, err := execution.NewWorker(f.rdb, f.config(execution.Config{ID: id}))
		if err != nil {
			t.Errorf("worker id %q: %v", id, err)
		} else if w.ID() == "" {
			t.Errorf("worker id %q: the worker has none", id)
		}
	}
}
