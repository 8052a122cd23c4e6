package httpapi_test

import (
	"context"
	"net/http"
	"slices"
	"sync"
	"testing"

	"github.com/leasehold/leasehold/execution"
	"github.com/leasehold/leasehold/job"
)

func TestIdempotencyKey(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	submit := func(key, idem, body string) response {
		t.Helper()
		return f.do(request{method: http.MethodPost, path: "/v1/jobs", key: key, body: body,
			header: http.Header{"Idempotency-Key": {idem}}})
	}
	const body = `{"kind": "echo", "input": {"a": 1, "b": [1, 2]}, "metadata": {"x": "y"}}`

	first := submit(acmeKey, "order-1", body)
	if first.StatusCode != http.StatusCreated {
		t.Fatalf("first: %s %s", first.Status, first.body)
	}
	id := decode[job.Job](t, first).ID

	sameBodies := []string{
		body,
		// key order and white space do not matter, nor spelling out defaults
		"{\n  \"metadata\": {\"x\": \"y\"},\n  \"input\": {\"b\": [1,2], \"a\": 1},\n  \"kind\": \"echo\"\n}",
		`{"kind":"echo","queue":"default","max_attempts":3,"input":{"b":[1,2],"a":1},"metadata":{"x":"y"},"timeout":"10m"}`,
	}
	for _, b := range sameBodies {
		again := submit(acmeKey, "order-1", b)
		if again.StatusCode != http.StatusOK {
			t.Fatalf("replay of %s: %s %s", b, again.Status, again.body)
		}
		if j := decode[job.Job](t, again); j.ID != id {
			t.Errorf("replay returned job %s, want %s", j.ID, id)
		}
		if again.Header.Get("Location") != "" {
			t.Errorf("a replay has a Location")
		}
	}

	for _, different := range []string{
		`{"kind": "echo", "input": {"a": 2, "b": [1, 2]}, "metadata": {"x": "y"}}`,
		`{"kind": "echo", "input": {"a": 1, "b": [2, 1]}, "metadata": {"x": "y"}}`,
		`{"kind": "echo", "input": {"a": 1, "b": [1, 2]}}`,
		`{"kind": "summarize", "input": {"a": 1, "b": [1, 2]}, "metadata": {"x": "y"}}`,
	} {
		expectProblem(t, submit(acmeKey, "order-1", different), http.StatusUnprocessableEntity, "Idempotency-Key")
	}

	// Keys are scoped to the tenant.
	other := submit(globexKey, "order-1", body)
	if other.StatusCode != http.StatusCreated || decode[job.Job](t, other).ID == id {
		t.Errorf("another tenant's same key: %s %s", other.Status, other.body)
	}
	// A new key is a new job.
	if resp := submit(acmeKey, "order-2", body); resp.StatusCode != http.StatusCreated {
		t.Errorf("new key: %s", resp.Status)
	}
	if list := decode[listBody](t, f.get(acmeKey, "/v1/jobs")); len(list.Jobs) != 2 {
		t.Errorf("acme has %d jobs, want 2", len(list.Jobs))
	}
}

// Concurrent identical requests create exactly one job: one 201, every
// other request 200 with that job.
func TestIdempotencyKeyConcurrent(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	const n = 20
	type result struct {
		status int
		id     string
	}
	results := make(chan result, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			<-start
			req := f.newRequest(request{method: http.MethodPost, path: "/v1/jobs", key: acmeKey,
				body: `{"kind": "echo", "input": {"n": 1}}`, header: http.Header{"Idempotency-Key": {"once"}}})
			resp, err := f.client.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			defer resp.Body.Close()
			j := decodeBody[job.Job](t, resp)
			results <- result{resp.StatusCode, j.ID}
		})
	}
	close(start)
	wg.Wait()
	close(results)
	created, ids := 0, map[string]bool{}
	for r := range results {
		switch r.status {
		case http.StatusCreated:
			created++
		case http.StatusOK:
		default:
			t.Errorf("status %d", r.status)
		}
		ids[r.id] = true
	}
	if created != 1 || len(ids) != 1 {
		t.Errorf("%d created, %d distinct jobs; want 1 and 1", created, len(ids))
	}
	if list := decode[listBody](t, f.get(adminKey, "/v1/jobs")); len(list.Jobs) != 1 {
		t.Errorf("%d jobs stored, want 1", len(list.Jobs))
	}
}

// A replay of the Idempotency-Key of a deleted job does not bring the job
// back: 409, and nothing is written.
func TestReplayAfterDeleteDoesNotRunTheJobAgain(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.startWorker(map[string]execution.Handler{"echo": func(_ context.Context, e *execution.Execution) (any, error) { return "ok", nil }})
	const body = `{"kind": "echo"}`
	submit := func() response {
		return f.do(request{method: http.MethodPost, path: "/v1/jobs", key: acmeKey, body: body,
			header: http.Header{"Idempotency-Key": {"once"}}})
	}
	first := submit()
	if first.StatusCode != http.StatusCreated {
		t.Fatalf("submit: %s %s", first.Status, first.body)
	}
	id := decode[job.Job](t, first).ID
	f.awaitState(id, job.StateSucceeded)
	if resp := f.do(request{method: http.MethodDelete, path: "/v1/jobs/" + id, key: acmeKey}); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("delete: %s %s", resp.Status, resp.body)
	}
	before := f.written()
	expectProblem(t, submit(), http.StatusConflict, "Idempotency-Key")
	if resp := f.get(acmeKey, "/v1/jobs/"+id); resp.StatusCode != http.StatusNotFound {
		t.Errorf("the deleted job after a replay: %s %s", resp.Status, resp.body)
	}
	if after := f.written(); !slices.Equal(before, after) {
		t.Errorf("the replay wrote keys:\nbefore %q\nafter  %q", before, after)
	}
}
