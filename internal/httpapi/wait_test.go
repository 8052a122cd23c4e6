package httpapi_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/leasehold/leasehold/execution"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/job"
)

// gate is a job kind whose executions wait until the test opens the gate.
func gate(open <-chan struct{}) execution.Handler {
	return func(ctx context.Context, e *execution.Execution) (any, error) {
		select {
		case <-open:
			return map[string]string{"gate": "passed"}, nil
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
	}
}

// A waiting GET returns as soon as the job ends: the request sleeps in
// XREAD BLOCK on the job's events until the finish appends its event.
func TestWaitReturnsWhenTheJobEnds(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	open := make(chan struct{})
	f.startWorker(map[string]execution.Handler{"gate": gate(open)})
	id := f.submit(acmeKey, `{"kind": "gate"}`).ID
	f.awaitState(id, job.StateRunning)

	type result struct {
		resp    response
		elapsed time.Duration
	}
	done := make(chan result, 1)
	go func() {
		start := time.Now()
		req := f.newRequest(request{method: http.MethodGet, path: "/v1/jobs/" + id + "?wait=60s", key: acmeKey})
		resp, err := f.client.Do(req)
		if err != nil {
			t.Error(err)
			done <- result{}
			return
		}
		defer resp.Body.Close()
		_ = decodeBody[job.Job](t, resp)
		done <- result{response{Response: resp}, time.Since(start)}
	}()
	// The request is blocked in Redis, not spinning.
	testenv.Eventually(t, 10*time.Second, func() bool { return f.blockedReads() == 1 }, "no blocked XREAD for the waiting request")
	select {
	case r := <-done:
		t.Fatalf("the wait returned before the job ended: %v", r.resp.Status)
	default:
	}

	close(open)
	select {
	case r := <-done:
		if r.resp.Response == nil {
			t.Fatal("no response")
		}
		if r.resp.StatusCode != http.StatusOK {
			t.Fatalf("status %s", r.resp.Status)
		}
		if r.elapsed > 30*time.Second {
			t.Errorf("the wait took %v: it did not end with the job", r.elapsed)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the wait did not end when the job did")
	}
	if j := f.job(id); j.State != job.StateSucceeded || string(j.Result) != `{"gate":"passed"}` {
		t.Errorf("job %+v", j)
	}
}

// A job that ended before the request returns at once, with its result.
func TestWaitOnAnEndedJob(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.startWorker(map[string]execution.Handler{"echo": func(_ context.Context, e *execution.Execution) (any, error) { return e.Input, nil }})
	id := f.submit(acmeKey, `{"kind": "echo", "input": {"hello": "world"}}`).ID
	resp := f.get(acmeKey, "/v1/jobs/"+id+"?wait=60s")
	j := decode[job.Job](t, resp)
	if j.State != job.StateSucceeded || string(j.Result) != `{"hello":"world"}` || j.Execution == nil || j.Execution.FinishedAt == nil {
		t.Errorf("job %+v", j)
	}
	start := time.Now()
	if j := decode[job.Job](t, f.get(acmeKey, "/v1/jobs/"+id+"?wait=60s")); j.State != job.StateSucceeded {
		t.Errorf("again: %s", j.State)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("a wait on an ended job took %v", d)
	}
}

// A job that does not end is returned as it stands when the wait is over.
func TestWaitEndsAfterTheWait(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	id := f.submit(acmeKey, `{"kind": "echo"}`).ID // no worker: it stays queued
	start := time.Now()
	resp := f.get(acmeKey, "/v1/jobs/"+id+"?wait=300ms")
	elapsed := time.Since(start)
	if j := decode[job.Job](t, resp); resp.StatusCode != 200 || j.State != job.StateQueued {
		t.Errorf("%s %+v", resp.Status, j)
	}
	if elapsed < 300*time.Millisecond {
		t.Errorf("returned after %v, before the wait was over", elapsed)
	}
	// wait=0s is no wait.
	if resp := f.get(acmeKey, "/v1/jobs/"+id+"?wait=0s"); resp.StatusCode != 200 {
		t.Errorf("wait=0s: %s", resp.Status)
	}
	for _, wait := range []string{"", "abc", "30", "-1s", "61s", "1h", "1e3s", "30s%00"} {
		expectProblem(t, f.get(acmeKey, "/v1/jobs/"+id+"?wait="+wait), 400, "wait")
	}
}
