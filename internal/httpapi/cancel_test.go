package httpapi_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/leasehold/leasehold/cancel"
	"github.com/leasehold/leasehold/execution"
	"github.com/leasehold/leasehold/internal/store/keys"
	"github.com/leasehold/leasehold/job"
)

func (f *fixture) cancel(key, id string) response {
	f.t.Helper()
	return f.do(request{method: http.MethodPost, path: "/v1/jobs/" + id + "/cancel", key: key})
}

func TestCancelQueuedJob(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	id := f.submit(acmeKey, `{"kind": "echo"}`).ID
	for range 2 { // idempotent: the second answers the same and changes nothing
		resp := f.cancel(acmeKey, id)
		j := decode[job.Job](t, resp)
		if resp.StatusCode != http.StatusAccepted || j.State != job.StateCancelled || j.FinishedAt == nil ||
			j.Error == nil || j.Error.Code != job.CodeCancelled {
			t.Fatalf("%s %s", resp.Status, resp.body)
		}
	}
	// A job that never ran needs no flag: no worker will ever start it.
	if n, err := f.rdb.Exists(context.Background(), keys.New(f.prefix).CancelFlag(id)).Result(); err != nil || n != 0 {
		t.Errorf("cancel flag of a queued job: %d %v", n, err)
	}
	expectProblem(t, f.cancel(acmeKey, "0192a000-0000-7000-8000-000000000000"), 404, "")
}

// A running job gets cancel_requested, a flag that outlives every attempt
// it has left, and its handler sees cancel.ErrRequested.
func TestCancelRunningJob(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	causes := make(chan error, 1)
	f.startWorker(map[string]execution.Handler{"block": func(ctx context.Context, _ *execution.Execution) (any, error) {
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return nil, context.Cause(ctx)
	}})
	id := f.submit(acmeKey, `{"kind": "block", "timeout": "2h", "max_attempts": 2}`).ID
	f.awaitState(id, job.StateRunning)

	resp := f.cancel(acmeKey, id)
	j := decode[job.Job](t, resp)
	if resp.StatusCode != http.StatusAccepted || !j.CancelRequested || j.State.Terminal() {
		t.Fatalf("%s %s", resp.Status, resp.body)
	}
	ttl, err := f.rdb.PTTL(context.Background(), keys.New(f.prefix).CancelFlag(id)).Result()
	if err != nil {
		t.Fatal(err)
	}
	// 2h for this attempt, 2h for the one left, and 10m.
	if ttl < 4*time.Hour || ttl > 4*time.Hour+10*time.Minute {
		t.Errorf("cancel flag TTL %v, want about 4h10m", ttl)
	}
	select {
	case cause := <-causes:
		if !errors.Is(cause, cancel.ErrRequested) {
			t.Errorf("handler stopped with %v, want cancel.ErrRequested", cause)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the handler was not cancelled")
	}
	done := f.awaitState(id, job.StateCancelled)
	if done.Error == nil || done.Error.Code != job.CodeCancelled {
		t.Errorf("ended %+v", done)
	}
	// Cancelling a cancelled job is accepted again.
	if resp := f.cancel(acmeKey, id); resp.StatusCode != http.StatusAccepted {
		t.Errorf("again: %s", resp.Status)
	}
}

// A job that ended otherwise cannot be cancelled: 409, with the job.
func TestCancelFinishedJob(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.startWorker(map[string]execution.Handler{"echo": func(_ context.Context, e *execution.Execution) (any, error) { return e.Input, nil }})
	id := f.submit(acmeKey, `{"kind": "echo", "input": [1]}`).ID
	f.awaitState(id, job.StateSucceeded)

	resp := f.cancel(acmeKey, id)
	p := expectProblem(t, resp, http.StatusConflict, "")
	j := decode[job.Job](t, resp) // the same body reads as the job
	if j.ID != id || j.State != job.StateSucceeded || string(j.Result) != `[1]` || j.CancelRequested || p.Status != 409 {
		t.Errorf("409 body %s", resp.body)
	}
	if again := f.job(id); again.State != job.StateSucceeded || again.CancelRequested {
		t.Errorf("a refused cancel changed the job: %+v", again)
	}
}
