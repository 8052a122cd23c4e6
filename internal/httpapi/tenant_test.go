package httpapi_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/leasehold/leasehold/execution"
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
	}, func(c *execution.Config) { c.Queues = []string{"batch", "gpu"} })

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
