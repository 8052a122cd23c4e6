package execution_test

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/store"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/execution"
	"github.com/leasehold/leasehold/internal/store/keys"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/job"
	"github.com/leasehold/leasehold/lease"
	"github.com/leasehold/leasehold/ratelimit/usage"
)

// Fault tests: worker processes (this test binary, re-executed in the
// "worker" role of helpers_test.go) are killed with SIGKILL, paused with
// SIGSTOP, stopped with SIGTERM, and Redis is killed under a running worker.
// Each test names, in its comment, the protection whose removal makes it fail.

// startHelper starts a worker subprocess on the fixture's keys and cancel
// subject, serving faultKind with the handler of mode. A data race the race
// detector finds in the subprocess fails the test: the subprocess writes its
// reports to a directory the test reads when it ends.
func (f *fixture) startHelper(t *testing.T, mode string, env ...string) *testenv.Process {
	t.Helper()
	races := t.TempDir()
	t.Cleanup(func() { // after StartHelper's own cleanup has killed the process
		reports, _ := filepath.Glob(filepath.Join(races, "race*"))
		for _, r := range reports {
			b, _ := os.ReadFile(r)
			t.Errorf("data race in worker subprocess:\n%s", b)
		}
	})
	gorace := strings.TrimSpace(os.Getenv("GORACE") + " log_path=" + filepath.Join(races, "race"))
	return testenv.StartHelper(t, "worker", append([]string{
		envPrefix + "=" + f.prefix, envSubject + "=" + f.subject, envMode + "=" + mode, "GORACE=" + gorace,
	}, env...)...)
}

// started is what a helper's "started <job> <token> <attempt>" line says.
type started struct {
	job     string
	token   uint64
	attempt int
}

// waitStarted waits for p to start job id and returns the execution's token
// and attempt.
func waitStarted(t *testing.T, p *testenv.Process, id string) started {
	t.Helper()
	rest := p.Line(t, "started "+id+" ", 10*time.Second)
	s, ok := parseStarted(id + " " + rest)
	if !ok {
		t.Fatalf("bad started line %q", rest)
	}
	return s
}

func parseStarted(fields string) (started, bool) {
	f := strings.Fields(fields)
	if len(f) != 3 {
		return started{}, false
	}
	token, err1 := strconv.ParseUint(f[1], 10, 64)
	attempt, err2 := strconv.Atoi(f[2])
	return started{job: f[0], token: token, attempt: attempt}, err1 == nil && err2 == nil
}

// leaseExpiry reads the Redis-clock expiry of job id's lease, in ms.
func (f *fixture) leaseExpiry(t *testing.T, id string) int64 {
	t.Helper()
	score, err := f.rdb.ZScore(t.Context(), keys.New(f.prefix).QueueLeases(job.DefaultQueue), id).Result()
	if err != nil {
		t.Fatalf("lease of %s: %v", id, err)
	}
	return int64(score)
}

// event is a decoded event of a job.
type event struct {
	typ     string
	state   job.State // state events
	attempt int       // state and progress events
	exec    string    // progress events
}

// events reads every event of job id, page by page, as the API does.
func (f *fixture) events(t *testing.T, id string) []event {
	t.Helper()
	var out []event
	for after := ""; ; {
		page, err := f.store.Events(t.Context(), "acme", id, false, after, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range page {
			e, err := decodeEvent(ev.Type, ev.Data)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, e)
		}
		if len(page) < job.EventsPage {
			return out
		}
		after = page[len(page)-1].ID
	}
}

func decodeEvent(typ string, data []byte) (event, error) {
	var d struct {
		State   job.State `json:"state"`
		Attempt int       `json:"attempt"`
		Exec    string    `json:"exec"`
	}
	if err := json.Unmarshal(data, &d); err != nil {
		return event{}, fmt.Errorf("event %s %s: %w", typ, data, err)
	}
	return event{typ: typ, state: d.State, attempt: d.Attempt, exec: d.Exec}, nil
}

// transitions are the job state changes the job package documents; "" is
// before the first state event. running → queued is a hand-off.
var transitions = map[job.State][]job.State{
	"":                {job.StateQueued},
	job.StateQueued:   {job.StateRunning, job.StateCancelled, job.StateExpired},
	job.StateRunning:  {job.StateSucceeded, job.StateFailed, job.StateCancelled, job.StateRetrying, job.StateQueued, job.StateWaiting},
	job.StateRetrying: {job.StateQueued, job.StateCancelled, job.StateExpired},
	job.StateWaiting:  {job.StateQueued, job.StateCancelled},
}

// checkStream checks the invariants of one job's event stream and returns
// what is wrong, "" if nothing: state events follow the allowed
// transitions; exactly one terminal state event, and it is the last event;
// each running event takes the attempt after the one of the state event
// before it, or the same one after a hand-off (running → queued), which
// keeps the attempt it did not spend; every
// progress event comes while the job is running and carries the attempt of
// that running event, and the progress of one run comes from one execution,
// never one that wrote in another run (no execution but the current one
// ever wrote: a handed-off execution shares its attempt with the next one).
func checkStream(events []event, j job.Job) string {
	terminals := 0
	var state job.State // as of the latest state event
	attempt := 0        // the job's attempt, as of the latest state event
	running := 0        // the attempt of the latest running event
	handedOff := false  // the latest state event is a hand-off
	writer := ""        // the execution whose progress the current run has seen
	wrote := map[string]bool{}
	for i, ev := range events {
		switch ev.typ {
		case "state":
			if !slices.Contains(transitions[state], ev.state) {
				return fmt.Sprintf("state %s after %s (event %d)", ev.state, cmp.Or(state, "nothing"), i+1)
			}
			next := attempt + 1
			if handedOff {
				next = attempt
			}
			switch {
			case ev.state == job.StateRunning && ev.attempt != next:
				return fmt.Sprintf("running event %d has attempt %d after attempt %d", i+1, ev.attempt, attempt)
			case ev.state == job.StateRunning:
				running, writer = ev.attempt, ""
			case state == job.StateRunning && ev.state == job.StateQueued && ev.attempt != running:
				return fmt.Sprintf("hand-off of attempt %d left attempt %d (event %d)", running, ev.attempt, i+1)
			}
			handedOff = state == job.StateRunning && ev.state == job.StateQueued
			state, attempt = ev.state, ev.attempt
			if ev.state.Terminal() {
				terminals++
				if i != len(events)-1 {
					return fmt.Sprintf("event %d of %d appended after the terminal state %s: %+v", i+1, len(events), ev.state, events[i+1:])
				}
			}
		case execution.EventProgress:
			if state != job.StateRunning || ev.attempt != running {
				return fmt.Sprintf("progress of attempt %d written while the job is %s after attempt %d started (event %d)", ev.attempt, state, running, i+1)
			}
			switch {
			case ev.exec == "" || ev.exec == writer:
			case writer != "":
				return fmt.Sprintf("progress of executions %s and %s in one run (event %d)", writer, ev.exec, i+1)
			case wrote[ev.exec]:
				return fmt.Sprintf("execution %s wrote progress in two runs (event %d)", ev.exec, i+1)
			default:
				writer, wrote[ev.exec] = ev.exec, true
			}
		}
	}
	if terminals != 1 {
		return fmt.Sprintf("%d terminal state events, want 1", terminals)
	}
	if last := events[len(events)-1]; last.state != j.State || last.attempt != j.Attempt {
		return fmt.Sprintf("last event %+v, but the job is %s at attempt %d", last, j.State, j.Attempt)
	}
	if running != j.Attempt {
		return fmt.Sprintf("the last running event has attempt %d, but the job is at attempt %d", running, j.Attempt)
	}
	return ""
}

// TestKilledWorkersJobIsRetriedWithAHigherToken: a worker process dies
// with SIGKILL mid-job; its lease expires and another worker re-runs the
// job, attempt 2 with a higher fencing token, within lease TTL plus one reap
// (how soon a leaked lease is reclaimed), and not before the lease expired.
//
// Fails when the claim script stops reaping expired leases (the job is never
// re-run).
func TestKilledWorkersJobIsRetriedWithAHigherToken(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	const ttl = time.Second
	j := f.submit(t, job.Submission{Kind: faultKind, MaxAttempts: 3})
	p := f.startHelper(t, "block", envLeaseTTL+"="+ttl.String())
	first := waitStarted(t, p, j.ID)
	if first.attempt != 1 {
		t.Fatalf("first execution has attempt %d", first.attempt)
	}

	type rerun struct {
		at      time.Time
		token   uint64
		attempt int
	}
	reruns := make(chan rerun, 4)
	// The survivor: f.config's 50ms heartbeat is its reap interval, and it
	// polls every 50ms; both are jittered ±50%.
	cfg := f.config(execution.Config{})
	f.startWorker(t, cfg, map[string]execution.Handler{
		faultKind: func(_ context.Context, e *execution.Execution) (any, error) {
			reruns <- rerun{at: time.Now(), token: uint64(e.Token()), attempt: e.Attempt()}
			return "rerun", nil
		},
	})

	expiry := f.leaseExpiry(t, j.ID) // a heartbeat after this only moves it later
	killed := time.Now()
	p.Kill(t)

	var r rerun
	select {
	case r = <-reruns:
	case <-time.After(ttl + 10*time.Second):
		t.Fatalf("job not re-run %v after its worker was killed", time.Since(killed))
	}
	took := r.at.Sub(killed)
	t.Logf("kill → re-run: %v (lease TTL %v)", took, ttl)
	if r.attempt != 2 || r.token <= first.token {
		t.Fatalf("re-run has attempt %d token %d; want attempt 2 and a token above %d", r.attempt, r.token, first.token)
	}
	// One reap: a reaper pass or a claim, each at most 1.5 intervals away,
	// then the 10ms backoff and the next claim; the rest is slack for a
	// loaded machine running -race.
	reap := 3*cfg.Heartbeat/2 + 10*time.Millisecond + 3*cfg.Poll/2
	if bound := ttl + reap + time.Second; took > bound {
		t.Errorf("re-run %v after the kill, beyond lease TTL + one reap (%v)", took, bound)
	}

	done := f.waitState(t, j.ID, 10*time.Second, job.StateSucceeded, job.StateFailed, job.StateCancelled)
	if done.State != job.StateSucceeded || done.Attempt != 2 || string(done.Result) != `"rerun"` {
		t.Fatalf("state %s attempt %d result %s; want succeeded on attempt 2", done.State, done.Attempt, done.Result)
	}
	if done.Execution.FencingToken.String() != strconv.FormatUint(r.token, 10) {
		t.Fatalf("final execution token %v, want the re-run's %d", done.Execution.FencingToken, r.token)
	}
	if started := done.Execution.StartedAt.UnixMilli(); started < expiry {
		t.Fatalf("attempt 2 started at %d (Redis ms), before attempt 1's lease expired at %d", started, expiry)
	}
	if msg := checkStream(f.events(t, j.ID), done); msg != "" {
		t.Fatal(msg)
	}
}

// TestPausedWorkerIsFencedAfterTakeover: a worker process is paused with
// SIGSTOP for twice the lease TTL while its handler writes progress events.
// Another worker takes the job over (attempt 2, higher token). When the
// paused one resumes, its handler — which keeps writing regardless of its
// context, the worst case — has its emit refused with ErrNotOwner, sees its
// context end with lease.ErrLost, and its finish is refused: the job ends as
// the new owner says, and no event of the old execution lands after the new
// one started.
//
// Fails when the emit script or the finish script stops checking the token.
func TestPausedWorkerIsFencedAfterTakeover(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	const ttl = time.Second
	j := f.submit(t, job.Submission{Kind: faultKind, MaxAttempts: 3})
	old := f.startHelper(t, "emit", envLeaseTTL+"="+ttl.String())
	first := waitStarted(t, old, j.ID)
	old.Line(t, "emit "+j.ID+" ok", 10*time.Second)

	type owner struct {
		token   uint64
		attempt int
		exec    string
	}
	owners := make(chan owner, 4)
	release := make(chan struct{})
	// A short grace: if the test fails while the handler waits, cleanup
	// need not wait 30s for it.
	f.startWorker(t, execution.Config{ShutdownGrace: 100 * time.Millisecond}, map[string]execution.Handler{
		faultKind: func(ctx context.Context, e *execution.Execution) (any, error) {
			owners <- owner{token: uint64(e.Token()), attempt: e.Attempt(), exec: e.ID}
			select {
			case <-release:
			case <-ctx.Done():
				return nil, context.Cause(ctx)
			}
			if err := e.Emit(ctx, execution.EventProgress, progress{Attempt: e.Attempt(), Exec: e.ID}); err != nil {
				return nil, err
			}
			return progress{Attempt: e.Attempt(), Exec: e.ID}, nil
		},
	})

	old.Stop(t)
	paused := time.Now()
	var next owner
	select {
	case next = <-owners:
	case <-time.After(ttl + 10*time.Second):
		old.Cont(t)
		t.Fatal("nobody took over the paused worker's job")
	}
	if next.attempt != 2 || next.token <= first.token {
		t.Fatalf("takeover has attempt %d token %d; want attempt 2 and a token above %d", next.attempt, next.token, first.token)
	}
	time.Sleep(time.Until(paused.Add(2 * ttl))) // the pause itself: 2×TTL
	old.Cont(t)

	old.Line(t, "emit "+j.ID+" refused 1", 10*time.Second)
	if cause := old.Line(t, "stopped "+j.ID+" ", 10*time.Second); cause != "lost" {
		t.Fatalf("the paused handler stopped with cause %s, want lease.ErrLost", cause)
	}
	old.Line(t, `level=WARN msg="finish refused`, 10*time.Second)
	if cur := f.get(t, j.ID); cur.State != job.StateRunning || cur.Execution.ID != next.exec {
		t.Fatalf("after the old owner's finish: state %s execution %+v; want running under %s", cur.State, cur.Execution, next.exec)
	}

	close(release)
	done := f.waitState(t, j.ID, 10*time.Second, job.StateSucceeded, job.StateFailed, job.StateCancelled, job.StateRetrying)
	var result progress
	if err := json.Unmarshal(done.Result, &result); err != nil || done.State != job.StateSucceeded ||
		done.Attempt != 2 || result.Exec != next.exec || done.Execution.ID != next.exec {
		t.Fatalf("state %s attempt %d result %s (%v); want succeeded with the result of %s", done.State, done.Attempt, done.Result, err, next.exec)
	}

	events := f.events(t, j.ID)
	if msg := checkStream(events, done); msg != "" {
		t.Fatal(msg)
	}
	var before, after int // progress events of attempt 1 and 2
	for _, ev := range events {
		switch {
		case ev.typ == execution.EventProgress && ev.attempt == 1:
			before++
		case ev.typ == execution.EventProgress && ev.attempt == 2 && ev.exec == next.exec:
			after++
		}
	}
	if before == 0 || after != 1 {
		t.Fatalf("%d progress events of attempt 1 and %d of attempt 2; want some and 1", before, after)
	}
}

// TestPausedWorkerCannotWriteToItsReapedJob: a worker is paused past its
// lease and the reaper takes the job back (retrying, then queued), but no
// worker has a free slot to claim it, so the job's token is still the
// paused execution's. When the worker resumes, its emit and its finish are
// refused all the same — the job is not running — and the job stays queued
// until a worker claims it as attempt 2.
//
// Fails when the emit or the finish script stops checking that the job is
// running (the token alone does not fence here).
func TestPausedWorkerCannotWriteToItsReapedJob(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	const ttl = time.Second
	j := f.submit(t, job.Submission{Kind: faultKind, MaxAttempts: 3})
	// One slot, which the paused handler keeps: A cannot claim j again.
	a := f.startHelper(t, "emit", envLeaseTTL+"="+ttl.String(), envConcurrency+"=1")
	first := waitStarted(t, a, j.ID)
	a.Line(t, "emit "+j.ID+" ok", 10*time.Second)

	// B reaps, but its one slot is taken by a job that waits for release.
	release := make(chan struct{})
	holding := make(chan struct{}, 1)
	hold := f.submit(t, job.Submission{Kind: "hold"})
	f.startWorker(t, execution.Config{Concurrency: 1, ShutdownGrace: 100 * time.Millisecond}, map[string]execution.Handler{
		"hold": func(ctx context.Context, _ *execution.Execution) (any, error) {
			holding <- struct{}{}
			select {
			case <-release:
				return nil, nil
			case <-ctx.Done():
				return nil, context.Cause(ctx)
			}
		},
		faultKind: func(context.Context, *execution.Execution) (any, error) { return "rerun", nil },
	})
	<-holding

	a.Stop(t)
	paused := time.Now()
	reaped := f.waitState(t, j.ID, ttl+10*time.Second, job.StateQueued, job.StateSucceeded, job.StateFailed)
	if reaped.State != job.StateQueued || reaped.Attempt != 1 || reaped.Execution.FencingToken.String() != strconv.FormatUint(first.token, 10) {
		a.Cont(t)
		t.Fatalf("after the lease expired: state %s attempt %d token %v; want queued, still at attempt 1 and token %d",
			reaped.State, reaped.Attempt, reaped.Execution.FencingToken, first.token)
	}
	time.Sleep(time.Until(paused.Add(2 * ttl))) // the pause itself: 2×TTL
	a.Cont(t)

	a.Line(t, "emit "+j.ID+" refused 1", 10*time.Second)
	if cause := a.Line(t, "stopped "+j.ID+" ", 10*time.Second); cause != "lost" {
		t.Fatalf("the paused handler stopped with cause %s, want lease.ErrLost", cause)
	}
	a.Line(t, `level=WARN msg="finish refused`, 10*time.Second)
	// A's slot is free again, so A may already have claimed j as attempt 2.
	if cur := f.get(t, j.ID); cur.Attempt == 1 && cur.State != job.StateQueued {
		t.Fatalf("after the paused worker's finish: state %s at attempt 1; want still queued", cur.State)
	}

	close(release)
	f.waitState(t, hold.ID, 10*time.Second, job.StateSucceeded)
	// Attempt 2 is B's, or A's own now that its slot is free: either way a
	// new execution, under a new token.
	done := f.waitState(t, j.ID, 10*time.Second, job.StateSucceeded, job.StateFailed, job.StateCancelled)
	if done.State != job.StateSucceeded || done.Attempt != 2 || uint64(done.Execution.FencingToken) <= first.token {
		t.Fatalf("state %s attempt %d token %v; want succeeded on attempt 2 under a token above %d",
			done.State, done.Attempt, done.Execution.FencingToken, first.token)
	}
	if msg := checkStream(f.events(t, j.ID), done); msg != "" {
		t.Fatal(msg)
	}
}

// TestStaleWorkerCannotKeepTheNewOwnersLeaseAlive: worker A is paused past
// its lease and worker B takes the job over. A resumes with a handler that
// never returns, so A goes on heartbeating for its execution. Then B is
// killed. A's heartbeats carry A's stale token, so they must not renew the
// lease that is now B's: B's lease expires and a third worker re-runs the
// job (attempt 3) within lease TTL plus one reap.
//
// Fails when the heartbeat script stops checking the token: the stale
// worker keeps the dead owner's lease alive and the job is never re-run.
// (The other tests cannot see that check: the stale worker's trust window
// has always closed, and its handler been told to stop, before its first
// heartbeat after a pause.)
func TestStaleWorkerCannotKeepTheNewOwnersLeaseAlive(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	const ttl = time.Second
	j := f.submit(t, job.Submission{Kind: faultKind, MaxAttempts: 5})
	// One slot, which its stuck handler keeps: A never claims the job again.
	a := f.startHelper(t, "stuck", envLeaseTTL+"="+ttl.String(), envConcurrency+"=1")
	first := waitStarted(t, a, j.ID)
	b := f.startHelper(t, "block", envLeaseTTL+"="+ttl.String())

	a.Stop(t)
	paused := time.Now()
	second := waitStarted(t, b, j.ID)
	if second.attempt != 2 || second.token <= first.token {
		a.Cont(t)
		t.Fatalf("takeover has attempt %d token %d; want attempt 2 and a token above %d", second.attempt, second.token, first.token)
	}
	time.Sleep(time.Until(paused.Add(2 * ttl))) // the pause itself: 2×TTL
	a.Cont(t)
	if cause := a.Line(t, "stopped "+j.ID+" ", 10*time.Second); cause != "lost" {
		t.Fatalf("the stale handler stopped with cause %s, want lease.ErrLost", cause)
	}

	reruns := make(chan started, 4)
	f.startWorker(t, execution.Config{}, map[string]execution.Handler{
		faultKind: func(_ context.Context, e *execution.Execution) (any, error) {
			reruns <- started{job: e.JobID, token: uint64(e.Token()), attempt: e.Attempt()}
			return "rerun", nil
		},
	})
	killed := time.Now()
	b.Kill(t)
	select {
	case r := <-reruns:
		t.Logf("owner killed → re-run: %v, with a stale worker heartbeating beside it", time.Since(killed))
		if r.attempt != 3 || r.token <= second.token {
			t.Fatalf("re-run has attempt %d token %d; want attempt 3 and a token above %d", r.attempt, r.token, second.token)
		}
	case <-time.After(ttl + 10*time.Second):
		t.Fatalf("job not re-run %v after its owner was killed: the stale worker's heartbeats keep its lease alive", time.Since(killed))
	}
	done := f.waitState(t, j.ID, 10*time.Second, job.StateSucceeded, job.StateFailed, job.StateCancelled)
	if done.State != job.StateSucceeded || done.Attempt != 3 {
		t.Fatalf("state %s attempt %d; want succeeded on attempt 3", done.State, done.Attempt)
	}
}

// TestCancelWithDeadOwnerIsFinalisedByReaper: the owner of a running job is
// killed with SIGKILL, then the job is cancelled. Nobody receives the NATS
// message; once the lease expires, a reaper finalises the job as cancelled
// on attempt 1 instead of retrying it, and it never runs again.
//
// Fails when the claim script's reaping ignores cancel_requested.
func TestCancelWithDeadOwnerIsFinalisedByReaper(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	const ttl = time.Second
	j := f.submit(t, job.Submission{Kind: faultKind, MaxAttempts: 3})
	p := f.startHelper(t, "block", envLeaseTTL+"="+ttl.String())
	waitStarted(t, p, j.ID)
	p.Kill(t)

	if got := f.cancelJob(t, j.ID); got.State != job.StateRunning || !got.CancelRequested {
		t.Fatalf("after cancel: state %s cancel_requested %v; want a running job with the request", got.State, got.CancelRequested)
	}
	ran := make(chan int, 4)
	f.startWorker(t, execution.Config{}, map[string]execution.Handler{
		faultKind: func(context.Context, *execution.Execution) (any, error) {
			ran <- 1
			return nil, nil
		},
	})
	done := f.waitState(t, j.ID, ttl+10*time.Second, job.StateSucceeded, job.StateFailed, job.StateCancelled)
	if done.State != job.StateCancelled || done.Attempt != 1 || errCode(done) != job.CodeCancelled {
		t.Fatalf("state %s attempt %d error %+v; want cancelled on attempt 1", done.State, done.Attempt, done.Error)
	}
	if done.Execution == nil || done.Execution.Attempt != 1 {
		t.Fatalf("execution %+v, want the first one's", done.Execution)
	}
	select {
	case <-ran:
		t.Fatal("a job cancelled while its owner was dead ran again")
	default:
	}
	if msg := checkStream(f.events(t, j.ID), done); msg != "" {
		t.Fatal(msg)
	}
}

// TestRedisRestartUnderRunningWorker: Redis is killed under a worker with
// jobs running and jobs waiting. Running handlers keep running while their
// trust window lasts, then self-fence (lease.ErrLost) within a lease TTL;
// when Redis comes back (AOF) every accepted job finishes, the interrupted
// ones on attempt 2, which starts only after attempt 1 stopped.
//
// Fails when the worker stops self-fencing (the trust timer does nothing).
func TestRedisRestartUnderRunningWorker(t *testing.T) {
	t.Parallel()
	srv := testenv.StartRedis(t)
	f := newFixtureOn(t, srv.Client(t), testenv.NATS(t).Conn(t))
	const (
		ttl     = 2 * time.Second
		running = 4
		total   = 12
	)
	type mark struct {
		job     string
		attempt int
		at      time.Time
		cause   error
	}
	starts, stops := make(chan mark, 4*total), make(chan mark, 4*total)
	release := make(chan struct{})
	f.startWorker(t, execution.Config{
		Concurrency: running, Heartbeat: 100 * time.Millisecond, LeaseTTL: ttl, ShutdownGrace: 100 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler), // it warns at every failed round trip
	}, map[string]execution.Handler{
		faultKind: func(ctx context.Context, e *execution.Execution) (any, error) {
			starts <- mark{job: e.JobID, attempt: e.Attempt(), at: time.Now()}
			select {
			case <-release:
				return progress{Attempt: e.Attempt()}, nil
			case <-ctx.Done():
				stops <- mark{job: e.JobID, attempt: e.Attempt(), at: time.Now(), cause: context.Cause(ctx)}
				return nil, context.Cause(ctx)
			}
		},
	})
	ids := make([]string, total)
	for i := range ids {
		ids[i] = f.submit(t, job.Submission{Kind: faultKind, MaxAttempts: 3}).ID
	}
	first := map[string]mark{}
	for range running {
		select {
		case m := <-starts:
			first[m.job] = m
		case <-time.After(10 * time.Second):
			t.Fatalf("only %d of %d handlers started", len(first), running)
		}
	}

	killed := time.Now()
	srv.Kill(t)
	// Deliberately let a quarter of the TTL pass: the handlers must still run.
	time.Sleep(ttl / 4)
	select {
	case m := <-stops:
		t.Fatalf("handler of %s stopped %v after Redis died, cause %v: before its trust window ended", m.job, m.at.Sub(killed), m.cause)
	default:
	}
	last := map[string]mark{}
	for range running {
		select {
		case m := <-stops:
			last[m.job] = m
			if !errors.Is(m.cause, lease.ErrLost) {
				t.Fatalf("handler of %s stopped with %v, want lease.ErrLost", m.job, m.cause)
			}
			t.Logf("handler of %s self-fenced %v after Redis died", m.job, m.at.Sub(killed))
		case <-time.After(ttl + 2*time.Second):
			t.Fatalf("%d of %d handlers still running %v after Redis died: no self-fencing", running-len(last), running, time.Since(killed))
		}
	}
	srv.Restart(t)
	// go-redis keeps answering with its last dial error for up to a second
	// after a run of failed dials: wait until this client reaches Redis again.
	testenv.Eventually(t, 10*time.Second, func() bool { return f.rdb.Ping(t.Context()).Err() == nil },
		"the client never reached the restarted Redis")
	close(release)

	for _, id := range ids {
		done := f.waitState(t, id, 2*ttl+10*time.Second, job.StateSucceeded, job.StateFailed, job.StateCancelled)
		want := 1
		if _, ok := first[id]; ok {
			want = 2
		}
		if done.State != job.StateSucceeded || done.Attempt != want {
			t.Fatalf("job %s: state %s attempt %d, want succeeded on attempt %d", id, done.State, done.Attempt, want)
		}
	}
	for len(starts) > 0 { // every job has ended: nothing sends any more
		m := <-starts
		if s, ok := last[m.job]; ok && m.attempt > 1 && !m.at.After(s.at) {
			t.Fatalf("job %s attempt %d started before attempt 1 stopped", m.job, m.attempt)
		}
	}
}

// TestGracefulShutdownHandsBackToAnotherWorker: a worker process gets
// SIGTERM while a max_attempts 1 job runs longer than the grace period. The
// handler is stopped with ErrShutdown after the grace, the job is handed
// back (queued, attempt 1 unspent, no lease) and the process exits 0; another
// worker then runs it to success on attempt 1.
//
// Fails when the finish script spends the attempt on a hand-off.
func TestGracefulShutdownHandsBackToAnotherWorker(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	const grace = 200 * time.Millisecond
	j := f.submit(t, job.Submission{Kind: faultKind, MaxAttempts: 1})
	p := f.startHelper(t, "block", envGrace+"="+grace.String())
	waitStarted(t, p, j.ID)

	termed := time.Now() // before the signal: the grace cannot start earlier
	p.Signal(t, syscall.SIGTERM)
	if cause := p.Line(t, "stopped "+j.ID+" ", 10*time.Second); cause != "shutdown" {
		t.Fatalf("handler stopped with cause %s, want ErrShutdown", cause)
	}
	if took := time.Since(termed); took < grace {
		t.Fatalf("handler stopped %v after SIGTERM, within the %v grace", took, grace)
	}
	p.Line(t, "exited", 10*time.Second)
	if code := p.Wait(t, 10*time.Second); code != 0 {
		t.Fatalf("worker exited with %d after SIGTERM", code)
	}

	back := f.get(t, j.ID)
	if back.State != job.StateQueued || back.Attempt != 1 {
		t.Fatalf("after hand-off: state %s attempt %d, want queued with attempt 1, unspent", back.State, back.Attempt)
	}
	if n := f.rdb.ZCard(t.Context(), keys.New(f.prefix).QueueLeases(job.DefaultQueue)).Val(); n != 0 {
		t.Fatalf("%d leases left after the hand-off", n)
	}

	f.startWorker(t, execution.Config{}, map[string]execution.Handler{faultKind: echo})
	done := f.waitState(t, j.ID, 10*time.Second, job.StateSucceeded, job.StateFailed)
	if done.State != job.StateSucceeded || done.Attempt != 1 {
		t.Fatalf("state %s attempt %d; want succeeded on attempt 1", done.State, done.Attempt)
	}
}

// TestChaosNeverLosesOrDoubleRunsAJob runs 4,000 jobs over three worker
// processes while, every 0.2–0.7s, one of them is killed with SIGKILL and
// replaced (three times in four) or paused with SIGSTOP for 1.5 lease TTLs.
// A kill is driven by state: it freezes the worker, reads the executions
// it holds running, and kills it only when it holds some (else lets it go
// on), so every kill cuts running executions short, and a run whose kills
// cut none fails as having proved nothing.
// Handlers emit one fenced progress event carrying their attempt, then
// return. Afterwards, for every job: it succeeded; its stream has exactly
// one terminal state event, the last; every progress event carries the
// attempt of the latest running event before it (no two executions of a
// job ever wrote); no two executions had the same attempt and tokens grow
// with attempts; an execution a killed worker had started either is the
// one that finished the job or was followed by a higher attempt; and every
// execution a kill cut short finished its job or was followed by one that did.
//
// Fails when the claim stops reaping (jobs stay running), or when the emit
// script stops checking that its job runs under its token (a resumed
// worker's events land after the end).
func TestChaosNeverLosesOrDoubleRunsAJob(t *testing.T) {
	t.Parallel()
	const (
		// Kills follow running executions, not the clock, so a few
		// thousand jobs prove as much as more would, at less cost to
		// `make test`.
		jobs    = 4_000
		workers = 3
		ttl     = time.Second
	)
	// Redis is not killed here, so the test runs on a server of its own,
	// with fsync left to the kernel: its ~25,000 writes neither wait on the
	// disk one event loop at a time nor slow the shared server of the
	// tests running beside it.
	srv := testenv.StartRedis(t)
	rdb := srv.Client(t)
	if err := rdb.ConfigSet(t.Context(), "appendfsync", "no").Err(); err != nil {
		t.Fatal(err)
	}
	f := newFixtureOn(t, rdb, testenv.NATS(t).Conn(t))
	began := time.Now()

	// Every line of every helper, drained as it comes.
	type proc struct {
		p      *testenv.Process
		gen    int // its worker id is chaos-<gen>
		killed bool
		starts []started
		lines  int
	}
	var (
		mu      sync.Mutex
		procs   []*proc
		drains  sync.WaitGroup
		refused atomic.Int64
		gen     int
	)
	spawn := func() *proc {
		gen++
		pr := &proc{gen: gen, p: f.startHelper(t, "quick", envLeaseTTL+"="+ttl.String(), envHeartbeat+"=250ms",
			envConcurrency+"=16", envID+"=chaos-"+strconv.Itoa(gen), envRedis+"="+srv.Addr())}
		mu.Lock()
		procs = append(procs, pr)
		mu.Unlock()
		drains.Go(func() {
			for l := range pr.p.Lines() {
				rest, isStart := strings.CutPrefix(l, "started ")
				mu.Lock()
				pr.lines++
				if isStart {
					if s, ok := parseStarted(rest); ok {
						pr.starts = append(pr.starts, s)
					}
				}
				mu.Unlock()
				if strings.HasPrefix(l, "emit ") && strings.Contains(l, " refused ") {
					refused.Add(1)
				}
			}
		})
		return pr
	}
	fleet := make([]*proc, workers)
	for i := range fleet {
		fleet[i] = spawn()
	}

	// Submit from many goroutines, each call one pipelined round trip pair.
	ctx, stop := context.WithCancel(context.Background())
	var submitters, watch sync.WaitGroup
	defer func() { stop(); submitters.Wait(); watch.Wait() }()
	ids := make([]string, jobs)
	var next atomic.Int64
	var submitErr atomic.Pointer[error]
	for range 32 {
		submitters.Go(func() {
			for i := next.Add(1) - 1; i < jobs; i = next.Add(1) - 1 {
				j, _, err := f.store.Submit(ctx, "acme", job.Submission{Kind: faultKind, MaxAttempts: 10}, "")
				if err != nil {
					submitErr.Store(&err)
					return
				}
				ids[i] = j.ID
			}
		})
	}

	// The end: every job submitted and none queued, running or retrying; or
	// a stall: 10s without any job ending.
	allDone := make(chan struct{})
	var submitted time.Duration
	watch.Go(func() {
		submitters.Wait()
		submitted = time.Since(began)
		if submitErr.Load() != nil {
			close(allDone)
			return
		}
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		left, moved := int64(-1), time.Now()
		for {
			stats, err := f.store.Stats(ctx)
			if err == nil && len(stats) == 1 {
				n := stats[0].Queued + stats[0].Running + stats[0].Retrying
				if n != left {
					left, moved = n, time.Now()
				}
				if n == 0 || time.Since(moved) > 10*time.Second {
					close(allDone)
					return
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	})

	// Chaos, from the test goroutine, until the end or a deadline, driven by
	// state, not by the clock: a kill first freezes its victim (SIGSTOP) and
	// reads which executions it holds running; only then does SIGKILL cut
	// them short, and a victim that holds none is let go (SIGCONT). So each
	// kill provably hit running executions, however fast the jobs run.
	deadline := time.Now().Add(90 * time.Second)
	kills, pauses := 0, 0
	var cut []started // the executions the kills cut short, as Redis had them
	for action := 0; ; action++ {
		if action > 0 { // the first comes as soon as the fleet runs anything
			select {
			case <-allDone:
			case <-time.After(200*time.Millisecond + rand.N(500*time.Millisecond)):
			}
		}
		if isDone(allDone) || time.Now().After(deadline) {
			break
		}
		i := rand.N(workers)
		fleet[i].p.Stop(t)
		if action%4 == 3 {
			time.Sleep(3 * ttl / 2) // a pause: the victim's leases run out meanwhile
			fleet[i].p.Cont(t)
			pauses++
			continue
		}
		running := f.runningOn(t, "chaos-"+strconv.Itoa(fleet[i].gen))
		if len(running) == 0 {
			fleet[i].p.Cont(t)
			continue
		}
		fleet[i].p.Kill(t)
		mu.Lock()
		fleet[i].killed = true
		mu.Unlock()
		fleet[i] = spawn()
		kills++
		cut = append(cut, running...)
	}
	stop() // the watcher, if the deadline came first
	watch.Wait()
	if errp := submitErr.Load(); errp != nil {
		t.Fatalf("submit: %v", *errp)
	}
	if stats, err := f.store.Stats(t.Context()); err != nil || len(stats) != 1 ||
		stats[0].Queued+stats[0].Running+stats[0].Retrying != 0 {
		t.Fatalf("after %v not every job ended (%v): %+v", time.Since(began), err, stats)
	}
	ran := time.Since(began)
	// Nobody may write after this point: every worker is gone.
	for _, pr := range fleet {
		pr.p.Kill(t)
	}
	drains.Wait()

	// Read every job, and its events as the API reads them.
	ks := keys.New(f.prefix)
	records := make(map[string]job.Job, jobs)
	streams := make(map[string][]event, jobs)
	for batch := range slices.Chunk(ids, 500) {
		hs := make([]*redis.MapStringStringCmd, len(batch))
		if _, err := f.rdb.Pipelined(t.Context(), func(p redis.Pipeliner) error {
			for k, id := range batch {
				hs[k] = p.HGetAll(t.Context(), ks.Job(job.DefaultQueue, id))
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		for k, id := range batch {
			j, err := store.ParseRecord(job.DefaultQueue, id, hs[k].Val())
			if err != nil {
				t.Fatalf("job %s: %v", id, err)
			}
			records[id] = j
			streams[id] = f.events(t, id)
		}
	}

	retried, bad := 0, 0
	for _, id := range ids {
		j := records[id]
		var result progress
		_ = json.Unmarshal(j.Result, &result)
		msg := checkStream(streams[id], j)
		switch {
		case msg != "":
		case j.State != job.StateSucceeded:
			msg = fmt.Sprintf("state %s, error %+v", j.State, j.Error)
		case result.Attempt != j.Attempt || result.Exec != j.Execution.ID:
			msg = fmt.Sprintf("result %s is not from the last execution %s (attempt %d)", j.Result, j.Execution.ID, j.Attempt)
		}
		if j.Attempt > 1 {
			retried++
		}
		if msg != "" {
			bad++
			if bad <= 10 {
				t.Errorf("job %s: %s; events %+v", id, msg, streams[id])
			}
		}
	}

	// Executions as the workers saw them start.
	byJob := map[string][]started{}
	hit, lines := 0, 0
	for _, pr := range procs {
		lines += pr.lines
		for _, s := range pr.starts {
			byJob[s.job] = append(byJob[s.job], s)
			j := records[s.job]
			finisher := j.Execution != nil && uint64(j.Execution.FencingToken) == s.token
			switch {
			case finisher && j.Execution.Attempt != s.attempt:
				t.Errorf("job %s: execution with token %d started as attempt %d, recorded as %d", s.job, s.token, s.attempt, j.Execution.Attempt)
			case !finisher && j.Attempt <= s.attempt:
				t.Errorf("job %s: attempt %d (token %d) did not finish it, yet no higher attempt followed (job at attempt %d)", s.job, s.attempt, s.token, j.Attempt)
			case !finisher && pr.killed:
				hit++
			}
		}
	}
	for id, ss := range byJob {
		slices.SortFunc(ss, func(a, b started) int { return a.attempt - b.attempt })
		for k := 1; k < len(ss); k++ {
			if ss[k].attempt == ss[k-1].attempt || ss[k].token <= ss[k-1].token {
				t.Errorf("job %s: executions %+v and %+v: one attempt ran twice or tokens did not grow", id, ss[k-1], ss[k])
			}
		}
	}
	if bad > 10 {
		t.Errorf("… %d jobs in all break an invariant", bad)
	}
	// Each execution a kill cut short either finished its job (its finish
	// was on the wire when the worker froze, and Redis ran it after the
	// read) or was followed by a higher attempt that did.
	cutShort := 0
	for _, c := range cut {
		j := records[c.job]
		switch {
		case j.Execution == nil:
			t.Errorf("job %s: no execution recorded, yet token %d ran it", c.job, c.token)
		case uint64(j.Execution.FencingToken) == c.token:
		case uint64(j.Execution.FencingToken) < c.token || j.Attempt <= c.attempt:
			t.Errorf("job %s: execution with token %d (attempt %d) was killed, yet no later one finished the job: %+v", c.job, c.token, c.attempt, j.Execution)
		default:
			cutShort++
		}
	}
	if kills == 0 || cutShort == 0 {
		t.Errorf("%d kills cut %d running executions short: the run proved nothing", kills, cutShort)
	}
	t.Logf("%d jobs in %v (submitted in %v; %.0f jobs/s) over %d worker processes: %d kills, %d pauses; "+
		"%d jobs retried, %d executions cut short by a kill (%d seen running; %d seen started), %d stale emits refused, %d helper lines",
		jobs, ran.Round(time.Millisecond), submitted.Round(time.Millisecond), float64(jobs)/ran.Seconds(), len(procs), kills, pauses,
		retried, cutShort, len(cut), hit, refused.Load(), lines)
}

// isDone reports whether c is closed, without waiting.
func isDone(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// runningOn returns the executions that worker holds running, as the job
// records in Redis have them.
func (f *fixture) runningOn(t *testing.T, worker string) []started {
	t.Helper()
	ks := keys.New(f.prefix)
	ids, err := f.rdb.ZRange(t.Context(), ks.QueueLeases(job.DefaultQueue), 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	cmds := make([]*redis.SliceCmd, len(ids))
	if _, err := f.rdb.Pipelined(t.Context(), func(p redis.Pipeliner) error {
		for k, id := range ids {
			cmds[k] = p.HMGet(t.Context(), ks.Job(job.DefaultQueue, id), "state", "exec_worker", "token", "attempt")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	var out []started
	for k, id := range ids {
		v := cmds[k].Val()
		if v[0] != "running" || v[1] != worker {
			continue
		}
		token, _ := strconv.ParseUint(v[2].(string), 10, 64)
		attempt, _ := strconv.Atoi(v[3].(string))
		out = append(out, started{job: id, token: token, attempt: attempt})
	}
	return out
}

// TestClaimWhoseReplyIsLostStillRunsTheJob: the reply to a claim is lost on
// the wire (the connection drops after Redis ran the script). The client
// library retries the claim on a new connection, as it retries any command
// after an EOF; the job it claimed the first time must still run.
//
// Today it does not: the retry finds the job already running (under the
// execution ids of the lost reply), claims nothing, and nobody owns the
// execution. Its lease expires unrenewed and the reaper spends the attempt:
// a max_attempts 1 job fails with lease_lost without ever having run (with
// more attempts left it runs a lease TTL late, one attempt down). This is
// the "unknown outcome" of a write whose reply is lost, on the claim. The
// claim run twice counts its execution started once.
func TestClaimWhoseReplyIsLostStillRunsTheJob(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	// The claim script must be cached in Redis, so the claim goes out as the
	// EVALSHA the trap looks for (not EVALSHA, NOSCRIPT, then EVAL).
	sha, err := execution.ClaimScript.Load(t.Context(), f.rdb).Result()
	if err != nil {
		t.Fatal(err)
	}
	proxy := startReplyDropper(t, testenv.Redis(t).Addr(), []byte(sha))
	proxied := *f
	proxied.rdb = redis.NewClient(&redis.Options{Addr: proxy.addr()})
	t.Cleanup(func() { proxied.rdb.Close() })

	counters, err := usage.New(store.New(f.rdb, store.Config{Prefix: f.prefix}), usage.Config{})
	if err != nil {
		t.Fatal(err)
	}
	j := f.submit(t, job.Submission{Kind: faultKind, MaxAttempts: 1})
	var ran atomic.Int64
	proxied.startWorker(t, execution.Config{Usage: counters}, map[string]execution.Handler{
		faultKind: func(context.Context, *execution.Execution) (any, error) {
			ran.Add(1)
			return "ran", nil
		},
	})
	done := f.waitState(t, j.ID, 10*time.Second, job.StateSucceeded, job.StateFailed, job.StateCancelled)
	if proxy.dropped.Load() == 0 {
		t.Fatal("no claim reply was dropped: the test proved nothing")
	}
	if done.State != job.StateSucceeded || ran.Load() != 1 {
		t.Fatalf("state %s attempt %d error %+v; the handler ran %d times. Want succeeded, run once: "+
			"a claim whose reply was lost, retried, left the job to the reaper", done.State, done.Attempt, done.Error, ran.Load())
	}
	want := map[string]int64{usage.JobsSubmitted: 1, usage.ExecutionsStarted: 1, usage.ExecutionsEnded("succeeded"): 1}
	if got := usageOf(t, f, counters); !maps.Equal(got, want) {
		t.Errorf("usage %v, want %v", got, want)
	}
}

// replyDropper is a TCP proxy to a Redis server that, the first time a
// command containing trigger goes through, forwards the command and then
// closes the connection instead of forwarding the reply.
type replyDropper struct {
	ln      net.Listener
	target  string
	trigger []byte
	fired   atomic.Bool
	dropped atomic.Int64

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

func startReplyDropper(t *testing.T, target string, trigger []byte) *replyDropper {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &replyDropper{ln: ln, target: target, trigger: trigger, conns: map[net.Conn]struct{}{}}
	p.wg.Go(p.accept)
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		for c := range p.conns {
			c.Close()
		}
		p.conns = nil
		p.mu.Unlock()
		p.wg.Wait()
	})
	return p
}

func (p *replyDropper) addr() string { return p.ln.Addr().String() }

// track remembers c so that cleanup closes it; false when cleanup already ran.
func (p *replyDropper) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conns == nil {
		c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *replyDropper) accept() {
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.track(client) {
			return
		}
		p.wg.Go(func() { p.serve(client) })
	}
}

func (p *replyDropper) serve(client net.Conn) {
	defer client.Close()
	server, err := net.Dial("tcp", p.target)
	if err != nil || !p.track(server) {
		return
	}
	defer server.Close()
	var drop atomic.Bool
	p.wg.Go(func() { // replies
		defer client.Close()
		buf := make([]byte, 64<<10)
		for {
			n, err := server.Read(buf)
			if n > 0 && drop.Load() {
				p.dropped.Add(1)
				server.Close()
				return
			}
			if n > 0 {
				if _, werr := client.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	})
	// Commands. The tail of the previous read is kept, so a trigger split
	// across two reads is still seen.
	buf := make([]byte, 64<<10)
	var tail []byte
	for {
		n, err := client.Read(buf)
		if n > 0 {
			window := append(tail, buf[:n]...)
			if bytes.Contains(window, p.trigger) && p.fired.CompareAndSwap(false, true) {
				drop.Store(true) // before the command reaches Redis, so its reply is the next read
			}
			tail = append([]byte(nil), window[max(0, len(window)-len(p.trigger)):]...)
			if _, werr := server.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
