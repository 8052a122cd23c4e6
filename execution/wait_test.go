package execution_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/store"

	"github.com/redis/go-redis/v9"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/leasehold/leasehold/execution"
	lkeys "github.com/leasehold/leasehold/internal/store/keys"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/job"
)

const waitKind = "approve"

// approve waits for the signal "approval" on its first execution, and on
// the next succeeds with what resumed it.
func approve(timeout time.Duration) execution.Handler {
	return func(ctx context.Context, e *execution.Execution) (any, error) {
		r := e.Resume()
		if r.Signal == nil {
			if err := e.Checkpoint(ctx, map[string]string{"asked": e.ID}); err != nil {
				return nil, err
			}
			return nil, execution.Wait("approval", timeout)
		}
		return map[string]any{"signal": r.Signal, "checkpoint": r.Checkpoint}, nil
	}
}

func (f *fixture) limitOf(t *testing.T, key string) job.Limit {
	t.Helper()
	ls, err := f.store.Limits(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range ls {
		if l.Key == key {
			return l
		}
	}
	t.Fatalf("no limit %s in %+v", key, ls)
	return job.Limit{}
}

func (f *fixture) signal(t *testing.T, id, name, data string) job.Job {
	t.Helper()
	j, _, err := f.store.Signal(t.Context(), "acme", id, false, name, json.RawMessage(data))
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// A waiting job holds no slot: with a limit-1 key, a second job runs
// while the first waits, in_use is 0 once both are done with it, and the
// signal brings the first back, which takes the slot again and succeeds
// with the signal's data and its own checkpoint.
//
// Fails when the wait keeps its slot (finishAll not releasing a waiting
// execution's): in_use stays 1 until the slot's TTL; or its execution
// lease (the finish script not removing it).
func TestWaitingJobReleasesItsSlot(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.setLimit(t, "model:one", 1)
	f.startWorker(t, execution.Config{}, map[string]execution.Handler{waitKind: approve(time.Hour), "echo": echo})
	keys, ks := []string{"model:one"}, lkeys.New(f.prefix)
	a := f.submit(t, job.Submission{Kind: waitKind, ConcurrencyKeys: keys})
	w := f.waitState(t, a.ID, 10*time.Second, job.StateWaiting)
	if w.WaitingFor == nil || w.WaitingFor.Name != "approval" || time.Until(w.WaitingFor.Until) < 50*time.Minute {
		t.Fatalf("waiting_for = %+v, want approval in about an hour", w.WaitingFor)
	}
	if w.Attempt != 1 || string(w.Checkpoint) == "" {
		t.Fatalf("waiting job: attempt %d (want 1, unspent), checkpoint %s", w.Attempt, w.Checkpoint)
	}
	// The finish releases the slot in its own round trip: well before the
	// lease TTL (5 s) would have let it expire.
	testenv.Eventually(t, time.Second, func() bool { return f.limitOf(t, "model:one").InUse == 0 },
		"in_use stayed above 0 while the job waits")
	if err := f.rdb.ZScore(t.Context(), ks.QueueLeases("default"), a.ID).Err(); !errors.Is(err, redis.Nil) {
		t.Fatalf("the waiting job's execution lease: %v, want none", err)
	}
	b := f.submit(t, job.Submission{Kind: "echo", ConcurrencyKeys: keys, Input: raw(`{"b":1}`)})
	f.waitState(t, b.ID, 2*time.Second, job.StateSucceeded)
	if ls, err := f.store.Stats(t.Context()); err != nil || len(ls) != 1 || ls[0].Waiting != 1 {
		t.Fatalf("queue stats %+v (%v), want 1 waiting", ls, err)
	}
	if f.signal(t, a.ID, "approval", `{"ok":true}`).State != job.StateQueued {
		t.Fatal("the signal did not queue the waiting job")
	}
	done := f.waitState(t, a.ID, 10*time.Second, job.StateSucceeded)
	var res struct {
		Signal     job.Signal        `json:"signal"`
		Checkpoint map[string]string `json:"checkpoint"`
	}
	if err := json.Unmarshal(done.Result, &res); err != nil {
		t.Fatal(err)
	}
	if res.Signal.Name != "approval" || string(res.Signal.Data) != `{"ok":true}` || res.Signal.TimedOut || res.Checkpoint["asked"] == "" {
		t.Fatalf("result %s: want the signal and the checkpoint", done.Result)
	}
	if done.Attempt != 1 || done.Execution.Attempt != 1 {
		t.Fatalf("attempt %d, execution attempt %d: want 1, a wait spends none", done.Attempt, done.Execution.Attempt)
	}
}

// A wait ends within the worker's retention, however long the handler
// (a tenant's input) asked it to be: a waiting job is kept whole.
func TestWaitIsCutToTheRetention(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.startWorker(t, execution.Config{Retention: 2 * time.Hour}, map[string]execution.Handler{waitKind: approve(100 * 365 * 24 * time.Hour)})
	a := f.submit(t, job.Submission{Kind: waitKind})
	w := f.waitState(t, a.ID, 10*time.Second, job.StateWaiting).WaitingFor
	if w == nil || time.Until(w.Until) > 2*time.Hour || time.Until(w.Until) < time.Hour {
		t.Fatalf("waiting_for = %+v, want a wait that ends in 2h, the retention", w)
	}
}

// A wait times out: the job resumes, told so, with error wait_timeout
// while it is queued again.
func TestWaitTimeoutResumes(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	var resumed atomic.Pointer[job.Signal]
	f.startWorker(t, execution.Config{}, map[string]execution.Handler{waitKind: func(ctx context.Context, e *execution.Execution) (any, error) {
		if s := e.Resume().Signal; s != nil {
			resumed.Store(s)
			return "done", nil
		}
		return nil, execution.Wait("approval", 200*time.Millisecond)
	}})
	a := f.submit(t, job.Submission{Kind: waitKind})
	f.waitState(t, a.ID, 10*time.Second, job.StateSucceeded)
	s := resumed.Load()
	if s == nil || !s.TimedOut || s.Name != "approval" || string(s.Data) != "null" {
		t.Fatalf("resumed with %+v, want a timed-out approval", s)
	}
	// The state event of the resume carries the wait_timeout error.
	events, err := f.store.Events(t.Context(), "acme", a.ID, false, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	var states []string
	var timedOut bool
	for _, e := range events {
		if e.Type == "state" {
			at, err := f.get(t, a.ID).At(e)
			if err != nil {
				t.Fatal(err)
			}
			states = append(states, string(at.State))
			if at.State == job.StateQueued && errCode(at) == job.CodeWaitTimeout {
				timedOut = true
			}
			if (at.State == job.StateWaiting) != (at.WaitingFor != nil) {
				t.Fatalf("state event %s: waiting_for %+v", at.State, at.WaitingFor)
			}
		}
	}
	if fmt.Sprint(states) != "[queued running waiting queued running succeeded]" || !timedOut {
		t.Fatalf("states %v (timed out: %v)", states, timedOut)
	}
}

// A waiting job is cancelled at once, and a signal then is refused.
func TestCancelWhileWaiting(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.startWorker(t, execution.Config{}, map[string]execution.Handler{waitKind: approve(time.Hour)})
	a := f.submit(t, job.Submission{Kind: waitKind})
	f.waitState(t, a.ID, 10*time.Second, job.StateWaiting)
	if j := f.cancelJob(t, a.ID); j.State != job.StateCancelled || j.WaitingFor != nil {
		t.Fatalf("cancel of a waiting job: %s, waiting_for %+v; want cancelled at once", j.State, j.WaitingFor)
	}
	if _, _, err := f.store.Signal(t.Context(), "acme", a.ID, false, "approval", nil); !errors.Is(err, job.ErrConflict) {
		t.Fatalf("signal of a cancelled job: %v, want ErrConflict", err)
	}
	if n, err := f.rdb.ZCard(t.Context(), lkeys.New(f.prefix).QueueScheduled("default")).Result(); err != nil || n != 0 {
		t.Fatalf("scheduled holds %d (%v): the cancelled wait's timeout stayed", n, err)
	}
}

// Signals race the waits: 200 jobs, each signalled at a random moment
// before, during or after its handler decides to wait, through one of two
// stores on clients of their own (two API processes). Each job resumes
// exactly once, with its own data, and none is left waiting.
//
// Fails when a signal that arrives before the wait is dropped (the finish
// not taking the kept sig:<name>): those jobs stay waiting for an hour.
func TestSignalRacesTheWait(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	other := store.New(testenv.Redis(t).Client(t), store.Config{Prefix: f.prefix})
	stores := []*store.Store{f.store, other}
	var runs sync.Map // job id -> *atomic.Int32: executions after the wait
	f.startWorker(t, execution.Config{Concurrency: 64}, map[string]execution.Handler{waitKind: func(ctx context.Context, e *execution.Execution) (any, error) {
		s := e.Resume().Signal
		if s == nil {
			time.Sleep(time.Duration(rand.IntN(3000)) * time.Microsecond) // the handler decides
			return nil, execution.Wait("go", time.Hour)
		}
		n, _ := runs.LoadOrStore(e.JobID, new(atomic.Int32))
		n.(*atomic.Int32).Add(1)
		return s.Data, nil
	}})
	const jobs = 200
	ids := make([]string, jobs)
	var sent sync.WaitGroup
	for i := range jobs {
		ids[i] = f.submit(t, job.Submission{Kind: waitKind}).ID
		sent.Go(func() {
			time.Sleep(time.Duration(rand.IntN(20000)) * time.Microsecond)
			data := fmt.Sprintf(`{"i":%d}`, i)
			if _, _, err := stores[i%2].Signal(context.Background(), "acme", ids[i], false, "go", json.RawMessage(data)); err != nil {
				t.Errorf("signal %d: %v", i, err)
			}
		})
	}
	sent.Wait()
	for i, id := range ids {
		j := f.waitState(t, id, 30*time.Second, job.StateSucceeded)
		if want := fmt.Sprintf(`{"i":%d}`, i); string(j.Result) != want {
			t.Fatalf("job %d resumed with %s, want %s", i, j.Result, want)
		}
	}
	for i, id := range ids {
		if n, ok := runs.Load(id); !ok || n.(*atomic.Int32).Load() != 1 {
			t.Fatalf("job %d resumed %v times, want once", i, n)
		}
	}
}

// A checkpoint is written only under the execution's token and identity:
// after a new execution owns the job, the old one's checkpoint is refused,
// and the new one's stands. Every later execution starts from it.
//
// Fails when the checkpoint script skips its token and identity check
// (the stale execution has another id too: neither alone is tested here).
func TestStaleCheckpointRefused(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	var first atomic.Pointer[execution.Execution]
	seen := make(chan execution.Resume, 3)
	f.startWorker(t, execution.Config{}, map[string]execution.Handler{"cp": func(ctx context.Context, e *execution.Execution) (any, error) {
		seen <- e.Resume()
		switch e.Attempt() {
		case 1:
			first.Store(e)
			if err := e.Checkpoint(ctx, 1); err != nil {
				return nil, err
			}
			return nil, errBoom // retried
		case 2:
			if err := e.Checkpoint(ctx, 2); err != nil {
				return nil, err
			}
			// The first execution, long ended, writes late.
			if err := first.Load().Checkpoint(ctx, "stale"); !errors.Is(err, execution.ErrNotOwner) {
				return nil, fmt.Errorf("stale checkpoint: %v, want ErrNotOwner", err)
			}
			return nil, errBoom
		}
		return "done", nil
	}})
	a := f.submit(t, job.Submission{Kind: "cp", MaxAttempts: 3})
	j := f.waitState(t, a.ID, 10*time.Second, job.StateSucceeded, job.StateFailed)
	if j.State != job.StateSucceeded || string(j.Checkpoint) != "2" {
		t.Fatalf("job %s (%+v), checkpoint %s; want succeeded with checkpoint 2", j.State, j.Error, j.Checkpoint)
	}
	for want := range []string{"", "1", "2"} {
		r := <-seen
		if got := string(r.Checkpoint); got != []string{"", "1", "2"}[want] {
			t.Fatalf("execution %d started from checkpoint %q, want %q", want+1, got, []string{"", "1", "2"}[want])
		}
	}
}

// A signal of another name is kept for a later wait; a job keeps at most
// job.MaxKeptSignals of them, and job.MaxKeptSignalBytes of their data.
func TestSignalsKeptAndBounded(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	a := f.submit(t, job.Submission{Kind: "nobody-serves-this", Delay: job.Duration(time.Hour)})
	for i := range job.MaxKeptSignals {
		if j := f.signal(t, a.ID, fmt.Sprintf("s%d", i), `1`); j.State != job.StateQueued {
			t.Fatalf("state %s", j.State)
		}
	}
	f.signal(t, a.ID, "s0", `2`) // replaces: not one more
	if _, _, err := f.store.Signal(t.Context(), "acme", a.ID, false, "one-more", nil); !errors.Is(err, job.ErrSignalsFull) {
		t.Fatalf("signal past the bound: %v, want ErrSignalsFull", err)
	}
	for _, bad := range []string{"", "Upper", "-x", string(make([]byte, 65))} {
		var invalid *job.ValidationError
		if _, _, err := f.store.Signal(t.Context(), "acme", a.ID, false, bad, nil); !errors.As(err, &invalid) {
			t.Fatalf("signal name %q: %v, want a ValidationError", bad, err)
		}
	}
	if _, _, err := f.store.Signal(t.Context(), "other", a.ID, false, "x", nil); !errors.Is(err, job.ErrNotFound) {
		t.Fatalf("another tenant's signal: %v, want ErrNotFound", err)
	}

	b := f.submit(t, job.Submission{Kind: "nobody-serves-this", Delay: job.Duration(time.Hour)})
	big := `"` + strings.Repeat("x", job.MaxSignalData-2) + `"`
	for i := range job.MaxKeptSignalBytes / job.MaxSignalData {
		f.signal(t, b.ID, fmt.Sprintf("big%d", i), big)
	}
	if _, _, err := f.store.Signal(t.Context(), "acme", b.ID, false, "one-more", raw(`1`)); !errors.Is(err, job.ErrSignalsFull) {
		t.Fatalf("a signal past the bytes bound: %v, want ErrSignalsFull", err)
	}
}

// A worker process paused with SIGSTOP past its lease TTL while its
// handler saves checkpoints: another worker takes the job over and saves
// its own; when the paused one resumes, its next checkpoint is refused,
// and the job keeps the new owner's.
//
// Fails when the checkpoint script skips its token and identity check, or
// its lease check (then the paused worker's checkpoint lands, as it does
// before the takeover is written).
func TestPausedWorkerCannotOverwriteTheCheckpoint(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	const ttl = time.Second
	j := f.submit(t, job.Submission{Kind: faultKind, MaxAttempts: 3})
	old := f.startHelper(t, "checkpoint", envLeaseTTL+"="+ttl.String())
	waitStarted(t, old, j.ID)
	old.Line(t, "checkpoint "+j.ID+" ok 1", 10*time.Second)
	old.Stop(t)
	paused := time.Now()

	took := make(chan string, 1)
	release := make(chan struct{})
	f.startWorker(t, execution.Config{ShutdownGrace: 100 * time.Millisecond}, map[string]execution.Handler{
		faultKind: func(ctx context.Context, e *execution.Execution) (any, error) {
			var before struct{ Attempt int }
			if err := json.Unmarshal(e.Resume().Checkpoint, &before); err != nil || before.Attempt != 1 {
				return nil, fmt.Errorf("the takeover started from checkpoint %s, want the first attempt's", e.Resume().Checkpoint)
			}
			if err := e.Checkpoint(ctx, progress{Attempt: e.Attempt(), Exec: e.ID}); err != nil {
				return nil, err
			}
			took <- e.ID
			select {
			case <-release:
			case <-ctx.Done():
				return nil, context.Cause(ctx)
			}
			return "done", nil
		},
	})
	var next string
	select {
	case next = <-took:
	case <-time.After(ttl + 10*time.Second):
		old.Cont(t)
		t.Fatal("nobody took over the paused worker's job")
	}
	time.Sleep(time.Until(paused.Add(2 * ttl))) // the pause itself: 2×TTL
	old.Cont(t)
	old.Line(t, "checkpoint "+j.ID+" refused 1", 10*time.Second)
	var cp progress
	if err := json.Unmarshal(f.get(t, j.ID).Checkpoint, &cp); err != nil || cp.Exec != next {
		t.Fatalf("checkpoint %+v (%v), want the new owner's %s", cp, err, next)
	}
	close(release)
	f.waitState(t, j.ID, 10*time.Second, job.StateSucceeded)
}

// A wait and its signal in the job's trace: the waiting execution's span
// has the wait and its checkpoint, the signal a span of its own, and the
// resumed execution's span the resume and a link to the one that waited.
func TestTraceOfAWaitAndItsSignal(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	store := store.New(f.rdb, store.Config{Prefix: f.prefix, TracerProvider: tp})
	f.startWorker(t, execution.Config{TracerProvider: tp, Heartbeat: time.Minute, LeaseTTL: 3 * time.Minute},
		map[string]execution.Handler{waitKind: approve(time.Hour)})
	j, _, err := store.Submit(t.Context(), "acme", job.Submission{Kind: waitKind}, "")
	if err != nil {
		t.Fatal(err)
	}
	f.waitState(t, j.ID, 10*time.Second, job.StateWaiting)
	if _, _, err := store.Signal(t.Context(), "acme", j.ID, false, "approval", json.RawMessage(`true`)); err != nil {
		t.Fatal(err)
	}
	f.waitState(t, j.ID, 10*time.Second, job.StateSucceeded)
	testenv.Eventually(t, 10*time.Second, func() bool {
		return len(named(exp.GetSpans(), "process default")) == 2
	}, "the two execution spans never ended")
	spans := exp.GetSpans()
	runs := named(spans, "process default")
	waited, resumed := runs[0], runs[1]
	wantEvents(t, "the waiting execution", waited, []string{"lease acquired", "checkpoint leasehold.bytes=48",
		"wait leasehold.signal=approval leasehold.wait_ms=3600000", "finished leasehold.outcome=waiting leasehold.job.state=waiting"})
	wantEvents(t, "the resumed execution", resumed, []string{"lease acquired",
		"resumed leasehold.signal=approval leasehold.timed_out=false", "finished leasehold.outcome=succeeded leasehold.job.state=succeeded"})
	if len(resumed.Links) != 1 || resumed.Links[0].SpanContext.SpanID() != waited.SpanContext.SpanID() {
		t.Errorf("the resumed execution's links %+v, want the waiting one's span", resumed.Links)
	}
	sig := one(t, spans, "signal default")
	if sig.Parent.TraceID() != waited.SpanContext.TraceID() || len(sig.Events) != 1 || sig.Events[0].Name != job.EventSignal {
		t.Errorf("signal span %+v: want one in the job's trace with a signal event", sig)
	}
}
