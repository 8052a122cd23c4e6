package httpapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/execution"
	"github.com/leasehold/leasehold/internal/httpapi"
	"github.com/leasehold/leasehold/internal/store/keys"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/job"
	"github.com/leasehold/leasehold/kinds"
)

// runs counts the executions of each job, so a handler can fail a job's
// first run and succeed on its retry.
type runs struct {
	mu sync.Mutex
	n  map[string]int
}

func (r *runs) next(id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.n == nil {
		r.n = map[string]int{}
	}
	r.n[id]++
	return r.n[id]
}

// failFirst fails a job's first execution for good and succeeds after.
func (r *runs) failFirst(_ context.Context, e *execution.Execution) (any, error) {
	if r.next(e.JobID) == 1 {
		return nil, &execution.PermanentError{Err: errors.New("first run fails")}
	}
	return "second run", nil
}

func (f *fixture) post(key, path string) response {
	f.t.Helper()
	return f.do(request{method: http.MethodPost, path: path, key: key})
}

func TestRetryRunsAgainWithAHigherToken(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	var r runs
	f.startWorker(map[string]execution.Handler{"flaky": r.failFirst})
	j := f.submit(acmeKey, `{"kind":"flaky","max_attempts":1}`)
	failed := f.awaitState(j.ID, job.StateFailed)
	if failed.Execution == nil {
		t.Fatal("a failed job without its execution")
	}

	// Not the owner's: as absent as a job that does not exist.
	expectProblem(t, f.post(globexKey, "/v1/jobs/"+j.ID+"/retry"), http.StatusNotFound, "")
	expectProblem(t, f.post(acmeKey, "/v1/jobs/01234567-89ab-7def-8123-456789abcdef/retry"), http.StatusNotFound, "")

	resp := f.post(acmeKey, "/v1/jobs/"+j.ID+"/retry")
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("retry: %s %s", resp.Status, resp.body)
	}
	// Its next execution is the 2nd attempt, of 1 more: 2 in all.
	if got := decode[job.Job](t, resp); got.ID != j.ID || got.State != job.StateQueued && got.State != job.StateRunning ||
		got.Attempt < 1 || got.Attempt > 2 || got.MaxAttempts != 2 {
		t.Errorf("retried job: %+v", got)
	}
	// A wait ends at the retried run's end, not at the failure before it.
	done := decode[job.Job](t, f.get(acmeKey, "/v1/jobs/"+j.ID+"?wait=20s"))
	if done.State != job.StateSucceeded {
		t.Fatalf("?wait= on a retried job answered %s", done.State)
	}
	if done.Execution == nil || done.Execution.FencingToken <= failed.Execution.FencingToken || done.Execution.ID == failed.Execution.ID {
		t.Errorf("the retry ran as %+v; the failed run was %+v: want a new execution with a higher token", done.Execution, failed.Execution)
	}
	if done.Attempt != 2 || done.Execution.Attempt != 2 || string(done.Result) != `"second run"` {
		t.Errorf("retried job ended %+v", done)
	}
	// Its events are kept: queued, running, failed, then again.
	// The stream replays them all and ends after the last.
	stream := f.openStream(acmeKey, j.ID, "")
	var states []job.State
	for e, ok := stream.next(); ok; e, ok = stream.next() {
		if e.typ == "state" {
			var st struct{ State job.State }
			if err := json.Unmarshal([]byte(e.data), &st); err != nil {
				t.Fatal(err)
			}
			states = append(states, st.State)
		}
	}
	want := []job.State{"queued", "running", "failed", "queued", "running", "succeeded"}
	if !equalStates(states, want) {
		t.Errorf("state events %v, want %v", states, want)
	}

	// A job that succeeded, or has not ended, is not retried: 409 with it.
	resp = f.post(acmeKey, "/v1/jobs/"+j.ID+"/retry")
	p := expectProblem(t, resp, http.StatusConflict, "")
	if got := decode[job.Job](t, resp); got.State != job.StateSucceeded || got.ID != j.ID || p.Detail == "" {
		t.Errorf("409 body: %s", resp.body)
	}
	f.startWorker(nil, func(c *execution.Config) { c.Queues = []string{"elsewhere"} }) // nothing runs "idle"'s jobs
	q := f.submit(acmeKey, `{"kind":"echo","queue":"idle"}`)
	expectProblem(t, f.post(acmeKey, "/v1/jobs/"+q.ID+"/retry"), http.StatusConflict, "")
}

func TestRetryOfAJobCancelledWhileRunning(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	var r runs
	started := make(chan string, 4)
	f.startWorker(map[string]execution.Handler{"slow": func(ctx context.Context, e *execution.Execution) (any, error) {
		n := r.next(e.JobID)
		started <- e.ID
		if n == 1 {
			<-ctx.Done() // cancelled
			return nil, context.Cause(ctx)
		}
		// The retried run outlives the watcher's first look at the cancel
		// flag and a few heartbeats: a stale flag or cancel_requested
		// would stop it.
		select {
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		case <-time.After(time.Second):
			return "done", nil
		}
	}})
	j := f.submit(acmeKey, `{"kind":"slow"}`)
	<-started
	if resp := f.post(acmeKey, "/v1/jobs/"+j.ID+"/cancel"); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("cancel: %s %s", resp.Status, resp.body)
	}
	f.awaitState(j.ID, job.StateCancelled)
	if resp := f.post(adminKey, "/v1/jobs/"+j.ID+"/retry"); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("retry: %s %s", resp.Status, resp.body)
	}
	done := f.awaitState(j.ID, job.StateSucceeded)
	if done.CancelRequested || done.Attempt != 2 {
		t.Errorf("retried job: %+v", done)
	}
}

// The sleep kind's fail_attempts counts attempt numbers, which a retry
// does not set back: a job that failed its only attempt as asked succeeds
// on the one its retry adds, and its events, replayed, show each
// execution's attempt and the max_attempts it had.
func TestRetriedSleepJobRunsItsNextAttempt(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.startWorker(map[string]execution.Handler{"sleep": kinds.Sleep(kinds.SleepConfig{})})
	j := f.submit(acmeKey, `{"kind":"sleep","max_attempts":1,"input":{"duration":"10ms","tick":"100ms","fail_attempts":1}}`)
	if failed := f.awaitState(j.ID, job.StateFailed); failed.Attempt != 1 || failed.MaxAttempts != 1 {
		t.Fatalf("failed at attempt %d of %d, want 1 of 1", failed.Attempt, failed.MaxAttempts)
	}
	if resp := f.post(acmeKey, "/v1/jobs/"+j.ID+"/retry"); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("retry: %s %s", resp.Status, resp.body)
	}
	done := f.awaitState(j.ID, job.StateSucceeded)
	if done.Attempt != 2 || done.MaxAttempts != 2 || done.Execution.Attempt != 2 {
		t.Fatalf("succeeded at attempt %d of %d (execution %+v), want 2 of 2", done.Attempt, done.MaxAttempts, done.Execution)
	}
	var got []string
	stream := f.openStream(acmeKey, j.ID, "")
	for e, ok := stream.next(); ok; e, ok = stream.next() {
		if e.typ == "state" {
			st := stateOf(t, e)
			got = append(got, fmt.Sprintf("%s %d/%d", st.State, st.Attempt, st.MaxAttempts))
		}
	}
	want := []string{"queued 0/1", "running 1/1", "failed 1/1", "queued 1/2", "running 2/2", "succeeded 2/2"}
	if !slices.Equal(got, want) {
		t.Errorf("state events %q, want %q", got, want)
	}
}

func TestBulkRetryTwiceMovesOnce(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	var r runs
	stop := f.startWorker(map[string]execution.Handler{"flaky": r.failFirst})
	var acme []job.Job
	for range 3 {
		acme = append(acme, f.submit(acmeKey, `{"kind":"flaky","max_attempts":1}`))
	}
	other := f.submit(globexKey, `{"kind":"flaky","max_attempts":1}`)
	for _, j := range append(acme, other) {
		f.awaitState(j.ID, job.StateFailed)
	}
	stop() // the retried jobs stay queued, to be counted

	bulk := func(key, body string) response {
		return f.do(request{method: http.MethodPost, path: "/v1/jobs/retry", key: key, body: body})
	}
	for run, want := range []int{3, 0} {
		resp := bulk(acmeKey, `{}`)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("bulk retry: %s %s", resp.Status, resp.body)
		}
		got := decode[struct {
			Moved  int
			Queues map[string]int
		}](t, resp)
		if got.Moved != want || got.Queues["default"] != want {
			t.Errorf("run %d moved %+v, want %d", run+1, got, want)
		}
	}
	for _, j := range acme {
		if got := f.job(j.ID); got.State != job.StateQueued {
			t.Errorf("acme's job is %s", got.State)
		}
	}
	if got := f.job(other.ID); got.State != job.StateFailed {
		t.Errorf("acme's bulk retry moved globex's job: %s", got.State)
	}
	expectProblem(t, bulk(acmeKey, `{"tenant":"globex"}`), http.StatusBadRequest, "tenant")
	expectProblem(t, bulk(acmeKey, `{"state":"succeeded"}`), http.StatusBadRequest, "state")
	expectProblem(t, bulk(acmeKey, `{"colour":"red"}`), http.StatusBadRequest, "colour")
	expectProblem(t, bulk(acmeKey, ``), http.StatusUnsupportedMediaType, "")
	resp := bulk(adminKey, `{"tenant":"globex","kind":"flaky","queue":"default"}`)
	if got := decode[struct{ Moved int }](t, resp); resp.StatusCode != http.StatusOK || got.Moved != 1 {
		t.Errorf("admin's bulk retry of globex: %s %s", resp.Status, resp.body)
	}
	f.startWorker(map[string]execution.Handler{"flaky": r.failFirst})
	for _, j := range append(acme, other) {
		f.awaitState(j.ID, job.StateSucceeded)
	}
}

func TestDeleteAnEndedJob(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	del := func(key, id string) response {
		return f.do(request{method: http.MethodDelete, path: "/v1/jobs/" + id, key: key})
	}
	stop := f.startWorker(nil, func(c *execution.Config) { c.Queues = []string{"elsewhere"} })
	defer stop()
	j := f.submit(acmeKey, `{"kind":"echo"}`)
	resp := del(acmeKey, j.ID)
	expectProblem(t, resp, http.StatusConflict, "")
	if got := decode[job.Job](t, resp); got.State != job.StateQueued {
		t.Errorf("409 body: %s", resp.body)
	}
	if resp := f.post(acmeKey, "/v1/jobs/"+j.ID+"/cancel"); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("cancel: %s", resp.Status)
	}
	expectProblem(t, del(globexKey, j.ID), http.StatusNotFound, "")
	if resp := del(acmeKey, j.ID); resp.StatusCode != http.StatusNoContent || len(resp.body) != 0 {
		t.Fatalf("delete: %s %q", resp.Status, resp.body)
	}
	expectProblem(t, f.get(acmeKey, "/v1/jobs/"+j.ID), http.StatusNotFound, "")
	expectProblem(t, f.get(acmeKey, "/v1/jobs/"+j.ID+"/events"), http.StatusNotFound, "")
	expectProblem(t, del(acmeKey, j.ID), http.StatusNotFound, "")
	list := decode[struct{ Jobs []job.Job }](t, f.get(acmeKey, "/v1/jobs"))
	if len(list.Jobs) != 0 {
		t.Errorf("the deleted job is still listed: %+v", list.Jobs)
	}
}

func TestPausedQueueHoldsItsJobsThroughAWorkerRestart(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	expectProblem(t, f.post(acmeKey, "/v1/queues/default/pause"), http.StatusNotFound, "")
	expectProblem(t, f.post(adminKey, "/v1/queues/%7Bx%7D/pause"), http.StatusBadRequest, "name")
	resp := f.post(adminKey, "/v1/queues/default/pause")
	if got := decode[job.QueueStats](t, resp); resp.StatusCode != http.StatusOK || !got.Paused || got.Name != "default" {
		t.Fatalf("pause: %s %s", resp.Status, resp.body)
	}
	held := f.submit(acmeKey, `{"kind":"echo"}`)
	echo := map[string]execution.Handler{"echo": func(_ context.Context, e *execution.Execution) (any, error) { return e.Input, nil }}
	both := func(c *execution.Config) { c.Queues = []string{"default", "other"} }
	for range 2 { // a worker, then another one that starts while the queue is paused
		stop := f.startWorker(echo, both)
		// A job of the other queue runs: the worker has claimed, and
		// claimed nothing from the paused queue.
		probe := f.submit(acmeKey, `{"kind":"echo","queue":"other"}`)
		f.awaitState(probe.ID, job.StateSucceeded)
		if got := f.job(held.ID); got.State != job.StateQueued {
			t.Fatalf("a job of the paused queue is %s", got.State)
		}
		stop()
	}
	queues := decode[struct{ Queues []job.QueueStats }](t, f.get(acmeKey, "/v1/queues"))
	found := false
	for _, q := range queues.Queues {
		found = found || q.Name == "default" && q.Paused && q.Queued == 1
	}
	if !found {
		t.Errorf("GET /v1/queues: %+v", queues)
	}
	f.startWorker(echo, both)
	expectProblem(t, f.post(globexKey, "/v1/queues/default/resume"), http.StatusNotFound, "")
	resp = f.post(adminKey, "/v1/queues/default/resume")
	if got := decode[job.QueueStats](t, resp); resp.StatusCode != http.StatusOK || got.Paused {
		t.Fatalf("resume: %s %s", resp.Status, resp.body)
	}
	f.awaitState(held.ID, job.StateSucceeded)
}

func TestQueueStatsCountFinishesPerMinute(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	var r runs
	f.startWorker(map[string]execution.Handler{"flaky": r.failFirst})
	var ids []string
	for range 3 {
		ids = append(ids, f.submit(acmeKey, `{"kind":"flaky","max_attempts":1}`).ID)
	}
	for _, id := range ids {
		f.awaitState(id, job.StateFailed)
	}
	expectProblem(t, f.get(acmeKey, "/v1/queues/default/stats"), http.StatusNotFound, "")
	expectProblem(t, f.get(adminKey, "/v1/queues/nothing/stats"), http.StatusNotFound, "")
	var failed int64
	testenv.Eventually(t, 5*time.Second, func() bool {
		resp := f.get(adminKey, "/v1/queues/default/stats")
		got := decode[struct {
			Name    string
			Minutes []struct{ Failed int64 }
		}](t, resp)
		failed = 0
		for _, m := range got.Minutes {
			failed += m.Failed
		}
		return resp.StatusCode == http.StatusOK && got.Name == "default" && len(got.Minutes) == 60 && failed == 3
	}, "failed in the last hour: %d, want 3", failed)
}

func equalStates(a, b []job.State) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// A retry counts like a submission: a tenant at its cap of jobs not ended
// cannot retry one more (single or bulk), and a bulk retry moves no more
// jobs than the room under the cap.
func TestRetryCountsAgainstTheTenantCap(t *testing.T) {
	t.Parallel()
	f := newFixture(t, func(c *httpapi.Config) { c.TenantMaxJobs = 2 })
	cancelled := func() string {
		t.Helper()
		j := f.submit(acmeKey, `{"kind": "echo", "queue": "idle"}`)
		if resp := f.cancel(acmeKey, j.ID); resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusAccepted {
			t.Fatalf("cancel: %s %s", resp.Status, resp.body)
		}
		f.awaitState(j.ID, job.StateCancelled)
		return j.ID
	}
	retry := func(id string) response {
		return f.do(request{method: http.MethodPost, path: "/v1/jobs/" + id + "/retry", key: acmeKey})
	}
	bulk := func() response {
		return f.do(request{method: http.MethodPost, path: "/v1/jobs/retry", key: acmeKey, body: `{"state": "cancelled"}`})
	}
	a, b, c := cancelled(), cancelled(), cancelled()
	f.submit(acmeKey, `{"kind": "echo", "queue": "idle"}`) // one not ended: room for one more

	if resp := bulk(); resp.StatusCode != http.StatusOK || decode[struct{ Moved int }](t, resp).Moved != 1 {
		t.Fatalf("bulk retry with room for one: %s %s", resp.Status, resp.body)
	}
	// At the cap now: neither kind of retry moves another.
	for _, id := range []string{a, b, c} {
		if f.job(id).State == job.StateCancelled {
			expectProblem(t, retry(id), http.StatusTooManyRequests, "")
		}
	}
	expectProblem(t, bulk(), http.StatusTooManyRequests, "")
	n := 0
	for _, id := range []string{a, b, c} {
		if f.job(id).State == job.StateQueued {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d of the cancelled jobs are queued again, want 1", n)
	}
}

// A bulk retry moves at most job.RetryPageMax jobs a call and answers
// where to continue; while one of a tenant's calls runs (its lock held,
// on any API process), another is a 409 with Retry-After and moves
// nothing.
func TestBulkRetryIsBoundedAndOnePerTenant(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := t.Context()
	for range job.RetryPageMax + 1 {
		j, _, err := f.store.Submit(ctx, "acme", job.Submission{Kind: "echo", Queue: "idle"}, "")
		if err == nil {
			_, err = f.store.Cancel(ctx, "acme", j.ID, false)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	type answer struct {
		Moved      int
		NextCursor *string `json:"next_cursor"`
	}
	bulk := func(body string) response {
		return f.do(request{method: http.MethodPost, path: "/v1/jobs/retry", key: acmeKey, body: body})
	}
	lock := keys.New(f.prefix).RetryLock("acme")
	f.rdb.Set(ctx, lock, "another call", time.Minute)
	resp := bulk(`{"state": "cancelled"}`)
	expectProblem(t, resp, http.StatusConflict, "")
	if resp.Header.Get("Retry-After") == "" {
		t.Error("409 without Retry-After")
	}
	f.rdb.Del(ctx, lock)

	resp = bulk(`{"state": "cancelled"}`)
	first := decode[answer](t, resp)
	if resp.StatusCode != http.StatusOK || first.Moved != job.RetryPageMax || first.NextCursor == nil {
		t.Fatalf("first call: %s %s", resp.Status, resp.body)
	}
	resp = bulk(`{"state": "cancelled", "cursor": "` + *first.NextCursor + `"}`)
	if last := decode[answer](t, resp); resp.StatusCode != http.StatusOK || last.Moved != 1 || last.NextCursor != nil {
		t.Fatalf("second call: %s %s", resp.Status, resp.body)
	}
	expectProblem(t, bulk(`{"cursor": "not-one"}`), http.StatusBadRequest, "cursor")
	expectProblem(t, bulk(`{"cursor": 7}`), http.StatusBadRequest, "cursor")
}

// ended submits n jobs of tenant acme to queue idle (no worker) and
// cancels them, through the store: no rate or cap spent.
func (f *fixture) ended(n int) []string {
	f.t.Helper()
	ctx := f.t.Context()
	ids := make([]string, n)
	for i := range ids {
		j, _, err := f.store.Submit(ctx, "acme", job.Submission{Kind: "echo", Queue: "idle"}, "")
		if err == nil {
			_, err = f.store.Cancel(ctx, "acme", j.ID, false)
		}
		if err != nil {
			f.t.Fatal(err)
		}
		ids[i] = j.ID
	}
	return ids
}

// unended is how many of acme's jobs in queue idle have not ended, as the
// cap counts them.
func (f *fixture) unended(ctx context.Context) (int64, error) {
	vals, err := f.rdb.HMGet(ctx, keys.New(f.prefix).QueueStats("idle"),
		"queued/acme", "running/acme", "retrying/acme", "waiting/acme").Result()
	var n int64
	for _, v := range vals {
		if s, ok := v.(string); ok {
			var k int64
			if _, err := fmt.Sscan(s, &k); err != nil {
				return 0, err
			}
			n += k
		}
	}
	return n, err
}

// A retry counts against the tenant's cap like a submission, checked with
// the move: bulk retries, single retries and submissions from many
// clients at once, while others cancel jobs to make room, never take the
// tenant past its cap, counted after every answer and all along.
//
// Fails when the cap is checked before the move instead of with it (two
// retries at the cap's last place both go ahead).
func TestConcurrentRetriesNeverPassTheTenantCap(t *testing.T) {
	t.Parallel()
	const limit = 5
	f := newFixture(t, func(c *httpapi.Config) { c.TenantMaxJobs = limit })
	ctx := t.Context()
	var mu sync.Mutex
	pool := f.ended(60) // the jobs to retry and cancel
	pick := func(i int) string {
		mu.Lock()
		defer mu.Unlock()
		return pool[(i*7919)%len(pool)]
	}
	var over, moved, capped atomic.Int64
	check := func() {
		n, err := f.unended(ctx)
		if err != nil {
			t.Error(err)
		} else if n > limit {
			over.Store(max(over.Load(), n))
		}
	}
	call := func(r request) (int, []byte) {
		resp, err := f.client.Do(f.newRequest(r))
		if err != nil {
			t.Error(err)
			return 0, nil
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		check()
		return resp.StatusCode, body
	}
	expect := func(what string, status int, body []byte, ok ...int) {
		if status != 0 && !slices.Contains(ok, status) {
			t.Errorf("%s: %d %s", what, status, body)
		}
		if status == http.StatusTooManyRequests {
			capped.Add(1)
		}
	}
	var clients, watcher sync.WaitGroup
	done := make(chan struct{})
	watcher.Go(func() {
		for {
			select {
			case <-done:
				return
			default:
				check()
			}
		}
	})
	for range 2 {
		clients.Go(func() {
			for range 25 {
				status, body := call(request{method: http.MethodPost, path: "/v1/jobs/retry", key: acmeKey, body: `{"state": "cancelled"}`})
				expect("bulk retry", status, body, http.StatusOK, http.StatusConflict, http.StatusTooManyRequests)
				if status == http.StatusOK {
					var page struct{ Moved int }
					if err := json.Unmarshal(body, &page); err != nil {
						t.Error(err)
					}
					moved.Add(int64(page.Moved))
				}
			}
		})
	}
	for g := range 4 {
		clients.Go(func() {
			for i := range 40 {
				status, body := call(request{method: http.MethodPost, path: "/v1/jobs/" + pick(g*40+i) + "/retry", key: acmeKey})
				expect("retry", status, body, http.StatusAccepted, http.StatusConflict, http.StatusTooManyRequests)
				if status == http.StatusAccepted {
					moved.Add(1)
				}
			}
		})
	}
	for range 3 {
		clients.Go(func() {
			for range 30 {
				status, body := call(request{method: http.MethodPost, path: "/v1/jobs", key: acmeKey, body: `{"kind": "echo", "queue": "idle"}`})
				expect("submit", status, body, http.StatusCreated, http.StatusTooManyRequests)
				if status == http.StatusCreated {
					var j job.Job
					if err := json.Unmarshal(body, &j); err != nil {
						t.Error(err)
					}
					mu.Lock()
					pool = append(pool, j.ID)
					mu.Unlock()
				}
			}
		})
	}
	for g := range 3 {
		clients.Go(func() {
			for i := range 60 {
				status, body := call(request{method: http.MethodPost, path: "/v1/jobs/" + pick(g*60+i+1) + "/cancel", key: acmeKey})
				expect("cancel", status, body, http.StatusOK, http.StatusAccepted, http.StatusConflict)
			}
		})
	}
	clients.Wait()
	close(done)
	watcher.Wait()
	if n := over.Load(); n > 0 {
		t.Errorf("the tenant had %d jobs not ended, over its cap of %d", n, limit)
	}
	// The test proves something only if retries moved jobs and the cap refused some.
	if moved.Load() == 0 || capped.Load() == 0 {
		t.Errorf("%d jobs retried, %d calls refused at the cap: the clients did not contend", moved.Load(), capped.Load())
	}
}

// Each job a bulk retry moves spends a unit of the tenant's submission
// rate: with 7 units, a call moves 7 jobs and answers where to go on, with
// Retry-After; the next call moves none and is a 429, and so is a single
// retry.
//
// Fails when a bulk retry spends one unit a call (it moves all 20).
func TestBulkRetrySpendsTheRatePerJob(t *testing.T) {
	t.Parallel()
	f := newFixture(t, withRate(t, "7/h"))
	ids := f.ended(20)
	bulk := func(body string) response {
		return f.do(request{method: http.MethodPost, path: "/v1/jobs/retry", key: acmeKey, body: body})
	}
	resp := bulk(`{"state": "cancelled"}`)
	page := decode[struct {
		Moved      int
		NextCursor *string `json:"next_cursor"`
	}](t, resp)
	if resp.StatusCode != http.StatusOK || page.Moved != 7 || page.NextCursor == nil {
		t.Fatalf("first call: %s %s; want 7 moved and a cursor", resp.Status, resp.body)
	}
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err != nil || s < 1 {
		t.Errorf("Retry-After %q on a call the rate cut short", resp.Header.Get("Retry-After"))
	}
	resp = bulk(`{"state": "cancelled", "cursor": "` + *page.NextCursor + `"}`)
	expectProblem(t, resp, http.StatusTooManyRequests, "")
	if resp.Header.Get("Retry-After") == "" {
		t.Error("429 without Retry-After")
	}
	queued := 0
	for _, id := range ids {
		if f.job(id).State == job.StateQueued {
			queued++
		}
	}
	if queued != 7 {
		t.Errorf("%d jobs queued again, want the rate's 7", queued)
	}
	for _, id := range ids {
		if f.job(id).State == job.StateCancelled {
			expectProblem(t, f.post(acmeKey, "/v1/jobs/"+id+"/retry"), http.StatusTooManyRequests, "")
			break
		}
	}
}
