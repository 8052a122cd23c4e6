package httpapi_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/execution"
	"github.com/leasehold/leasehold/internal/httpapi"
	"github.com/leasehold/leasehold/job"
)

// queues reads GET /v1/queues as key's tenant.
func (f *fixture) queues(key string) []job.QueueStats {
	f.t.Helper()
	resp := f.get(key, "/v1/queues")
	if resp.StatusCode != http.StatusOK {
		f.t.Fatalf("GET /v1/queues: %s %s", resp.Status, resp.body)
	}
	return decode[struct {
		Queues []job.QueueStats `json:"queues"`
	}](f.t, resp).Queues
}

// GET /v1/queues shows a tenant the counts of its own jobs alone, in every
// state that is still moving and in several queues; the admin sees them
// all.
func TestQueuesShowEachTenantItsOwnJobs(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	if body := string(bytes.TrimSpace(f.get(acmeKey, "/v1/queues").body)); body != `{"queues":[]}` {
		t.Errorf("no queues: %s", body)
	}
	// A worker serves batch and gpu; default has none, so its jobs wait.
	f.startWorker(map[string]execution.Handler{
		"block": func(ctx context.Context, _ *execution.Execution) (any, error) {
			<-ctx.Done()
			return nil, context.Cause(ctx)
		},
		"later": func(context.Context, *execution.Execution) (any, error) {
			return nil, execution.RetryAfter(errors.New("not yet"), time.Hour)
		},
		"echo": func(_ context.Context, e *execution.Execution) (any, error) { return e.Input, nil },
	}, func(c *execution.Config) {
		c.Queues = []string{"batch", "gpu"}
		c.ShutdownGrace = 50 * time.Millisecond // the blocked handlers end at the test's end
	})

	jobs := map[string][]struct {
		body  string
		state job.State
	}{
		acmeKey: {
			{`{"kind":"echo"}`, job.StateQueued},
			{`{"kind":"echo"}`, job.StateQueued},
			{`{"kind":"block","queue":"batch"}`, job.StateRunning},
			{`{"kind":"later","queue":"batch"}`, job.StateRetrying},
			{`{"kind":"echo","queue":"batch"}`, job.StateSucceeded},
			{`{"kind":"later","queue":"gpu"}`, job.StateRetrying},
		},
		globexKey: {
			{`{"kind":"echo"}`, job.StateQueued},
			{`{"kind":"echo"}`, job.StateCancelled},
			{`{"kind":"block","queue":"batch"}`, job.StateRunning},
			{`{"kind":"block","queue":"batch"}`, job.StateRunning},
			{`{"kind":"echo","queue":"gpu"}`, job.StateSucceeded},
		},
	}
	for key, list := range jobs {
		for _, j := range list {
			id := f.submit(key, j.body).ID
			if j.state == job.StateCancelled {
				if resp := f.post(key, "/v1/jobs/"+id+"/cancel"); resp.StatusCode != http.StatusAccepted {
					t.Fatalf("cancel: %s %s", resp.Status, resp.body)
				}
			}
			f.awaitState(id, j.state)
		}
	}

	want := map[string][]job.QueueStats{
		acmeKey:   {{Name: "batch", Running: 1, Retrying: 1}, {Name: "default", Queued: 2}, {Name: "gpu", Retrying: 1}},
		globexKey: {{Name: "batch", Running: 2}, {Name: "default", Queued: 1}, {Name: "gpu"}},
		adminKey:  {{Name: "batch", Running: 3, Retrying: 1}, {Name: "default", Queued: 3}, {Name: "gpu", Retrying: 1}},
	}
	for key, want := range want {
		if got := f.queues(key); !slices.Equal(got, want) {
			t.Errorf("%s sees %+v, want %+v", key, got, want)
		}
	}
}

// A tenant at its cap of jobs not ended, summed over the queues, gets 429
// with Retry-After and a problem that says why, and nothing is written; an
// idempotent replay is still answered with its job; other tenants are not
// touched; once one of its jobs ends, the tenant may submit again.
func TestTenantCapOnJobsNotEnded(t *testing.T) {
	t.Parallel()
	f := newFixture(t, func(c *httpapi.Config) { c.TenantMaxJobs = 3 })
	first := f.submit(acmeKey, `{"kind":"echo"}`)
	f.submit(acmeKey, `{"kind":"echo","queue":"batch"}`)
	resp := f.postJob(acmeKey, `{"kind":"echo","queue":"gpu"}`, "once")
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("third job: %s %s", resp.Status, resp.body)
	}
	third := decode[job.Job](t, resp)

	before, jobs := f.written(), f.list(acmeKey)
	for _, idem := range []string{"", "another"} { // a new key writes no record either
		resp := f.postJob(acmeKey, `{"kind":"echo"}`, idem)
		p := expectProblem(t, resp, http.StatusTooManyRequests, "")
		if p.Detail != "tenant has 3 jobs not ended, the cap is 3; retry once some have ended" {
			t.Errorf("detail %q", p.Detail)
		}
		if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err != nil || s < 1 {
			t.Errorf("Retry-After %q", resp.Header.Get("Retry-After"))
		}
	}
	if after := f.written(); !slices.Equal(before, after) {
		t.Errorf("a refused job wrote to Redis:\nbefore %v\nafter  %v", before, after)
	}
	if after := f.list(acmeKey); !slices.Equal(after, jobs) {
		t.Errorf("jobs %v after the refusals, were %v", after, jobs)
	}
	resp = f.postJob(acmeKey, `{"kind":"echo","queue":"gpu"}`, "once")
	if resp.StatusCode != http.StatusOK || decode[job.Job](t, resp).ID != third.ID {
		t.Errorf("replay at the cap: %s %s", resp.Status, resp.body)
	}
	f.submit(globexKey, `{"kind":"echo"}`) // another tenant's jobs are its own

	if resp := f.post(acmeKey, "/v1/jobs/"+first.ID+"/cancel"); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("cancel: %s %s", resp.Status, resp.body)
	}
	f.submit(acmeKey, `{"kind":"echo"}`)
	expectProblem(t, f.postJob(acmeKey, `{"kind":"echo","queue":"batch"}`, ""), http.StatusTooManyRequests, "")

	// Concurrent submissions to one queue never pass the cap: globex has
	// one job, so two of 20 get in.
	codes, start := make(chan int, 20), make(chan struct{})
	var wg sync.WaitGroup
	for range 20 {
		req := f.newRequest(request{method: http.MethodPost, path: "/v1/jobs", key: globexKey, body: `{"kind":"echo","queue":"idle"}`})
		wg.Go(func() {
			<-start // all at once, so that many pass the first count together
			resp, err := f.client.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			resp.Body.Close()
			codes <- resp.StatusCode
		})
	}
	close(start)
	wg.Wait()
	close(codes)
	n := map[int]int{}
	for c := range codes {
		n[c]++
	}
	if n[http.StatusCreated] != 2 || n[http.StatusTooManyRequests] != 18 {
		t.Errorf("20 concurrent submissions at 1 of 3 jobs: %v, want 2 created and 18 refused", n)
	}
}

// list returns the ids of key's tenant's jobs, newest first.
func (f *fixture) list(key string) []string {
	f.t.Helper()
	resp := f.get(key, "/v1/jobs?limit=500")
	if resp.StatusCode != http.StatusOK {
		f.t.Fatalf("list: %s %s", resp.Status, resp.body)
	}
	return decode[listBody](f.t, resp).ids()
}

// A tenant never sees which host runs its jobs: execution.worker is a
// stable opaque name in every job object it is shown (GET, a listing, a
// state event, a cancel's answer); the admin sees the worker's own id.
func TestTenantSeesAnOpaqueWorkerName(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	const workerID = "gpu-host-7.internal-4242-beef"
	f.startWorker(map[string]execution.Handler{
		"echo": func(context.Context, *execution.Execution) (any, error) { return "ok", nil },
	}, func(c *execution.Config) { c.ID = workerID })
	first := f.submit(acmeKey, `{"kind": "echo"}`)
	second := f.submit(acmeKey, `{"kind": "echo"}`)
	f.awaitState(first.ID, job.StateSucceeded)
	f.awaitState(second.ID, job.StateSucceeded)

	if admin := f.job(first.ID); admin.Execution == nil || admin.Execution.Worker != workerID {
		t.Fatalf("the admin sees execution %+v, want worker %q", admin.Execution, workerID)
	}
	opaque := func(what string, j job.Job) string {
		t.Helper()
		if j.Execution == nil || j.Execution.Worker == "" {
			t.Fatalf("%s: no worker name in %+v", what, j.Execution)
		}
		if w := j.Execution.Worker; strings.Contains(w, "gpu-host") || strings.Contains(w, "4242") {
			t.Errorf("%s: the tenant sees the worker %q", what, w)
		}
		return j.Execution.Worker
	}
	name := opaque("GET", decode[job.Job](t, f.get(acmeKey, "/v1/jobs/"+first.ID)))
	if n := opaque("GET of another job", decode[job.Job](t, f.get(acmeKey, "/v1/jobs/"+second.ID))); n != name {
		t.Errorf("one worker has two names: %q and %q", name, n)
	}
	for _, j := range decode[listBody](t, f.get(acmeKey, "/v1/jobs")).Jobs {
		if n := opaque("listing", j); n != name {
			t.Errorf("listing: %q, want %q", n, name)
		}
	}
	cancelled := f.cancel(acmeKey, first.ID)
	if n := opaque("cancel of an ended job", decode[job.Job](t, cancelled)); n != name {
		t.Errorf("cancel: %q, want %q", n, name)
	}
	for _, e := range f.openStream(acmeKey, first.ID, "").rest() {
		if e.typ == "state" {
			if j := stateOf(t, e); j.Execution != nil {
				if n := opaque("state event", j); n != name {
					t.Errorf("state event: %q, want %q", n, name)
				}
			}
		}
	}
	for _, e := range f.openStream(adminKey, first.ID, "").rest() {
		if e.typ != "state" {
			continue
		}
		if j := stateOf(t, e); j.Execution != nil && j.Execution.Worker != workerID {
			t.Errorf("the admin's state event shows worker %q, want %q", j.Execution.Worker, workerID)
		}
	}
}
