package httpapi_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/execution"
	"github.com/leasehold/leasehold/job"
)

// POST /v1/jobs/{id}/signal: a waiting job resumes with the signal at
// once (202, queued); bad bodies are 400 and change nothing; another
// tenant gets 404; an ended job 409 with the job.
func TestSignalEndpoint(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.startWorker(map[string]execution.Handler{"approve": func(ctx context.Context, e *execution.Execution) (any, error) {
		if s := e.Resume().Signal; s != nil {
			return s, nil
		}
		return nil, execution.Wait("approval", time.Hour)
	}})
	j := f.submit(acmeKey, `{"kind":"approve"}`)
	w := f.awaitState(j.ID, job.StateWaiting)
	if w.WaitingFor == nil || w.WaitingFor.Name != "approval" {
		t.Fatalf("waiting_for %+v", w.WaitingFor)
	}
	path := "/v1/jobs/" + j.ID + "/signal"
	post := func(key, body string) response {
		return f.do(request{method: http.MethodPost, path: path, key: key, body: body})
	}
	for body, field := range map[string]string{
		`{"data":{}}`:                   "name",
		`{"name":"Approval"}`:           "name",
		`{"name":"approval","extra":1}`: "extra",
		`{"name":7}`:                    "name",
		`{"name":"approval","data":"` + strings.Repeat("x", 70<<10) + `"}`: "data",
	} {
		expectProblem(t, post(acmeKey, body), http.StatusBadRequest, field)
	}
	expectProblem(t, post(acmeKey, `[`), http.StatusBadRequest, "")
	expectProblem(t, f.do(request{method: http.MethodPost, path: path, key: acmeKey, body: `{"name":"approval"}`,
		header: http.Header{"Content-Type": {"text/plain"}}}), http.StatusUnsupportedMediaType, "")
	expectProblem(t, post(globexKey, `{"name":"approval"}`), http.StatusNotFound, "")
	if got := f.job(j.ID); got.State != job.StateWaiting {
		t.Fatalf("bad signals moved the job to %s", got.State)
	}

	resp := post(acmeKey, `{"name":"approval","data":{"ok":true}}`)
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("signal: %s %s", resp.Status, resp.body)
	}
	if got := decode[job.Job](t, resp); got.State != job.StateQueued && got.State != job.StateRunning {
		t.Fatalf("after the signal: %s, want queued", got.State)
	}
	done := f.awaitState(j.ID, job.StateSucceeded)
	if string(done.Result) != `{"name":"approval","data":{"ok":true},"timed_out":false}` {
		t.Fatalf("result %s", done.Result)
	}
	resp = post(adminKey, `{"name":"approval"}`)
	if resp.StatusCode != http.StatusConflict || decode[job.Job](t, resp).State != job.StateSucceeded {
		t.Fatalf("signal of an ended job: %s %s", resp.Status, resp.body)
	}
	expectProblem(t, post(acmeKey, `{"name":"approval"}`), http.StatusConflict, "")
}
