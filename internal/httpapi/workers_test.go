package httpapi_test

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/execution"
	"github.com/leasehold/leasehold/internal/httpapi"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/job"
)

// GET /v1/workers lists the live workers: the admin every one, as it
// names itself; a tenant those running its jobs, under the name its
// executions show, without the host; another tenant none. A worker that
// stops drops out.
//
// Fails when a worker does not publish itself, a tenant sees a worker
// that runs none of its jobs or a name its executions do not show.
func TestWorkersListsTheLiveWorkers(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	release := make(chan struct{})
	stop := f.startWorker(map[string]execution.Handler{
		"slow": func(ctx context.Context, _ *execution.Execution) (any, error) {
			select {
			case <-release:
			case <-ctx.Done():
			}
			return nil, nil
		},
		"echo": func(context.Context, *execution.Execution) (any, error) { return nil, nil },
	}, func(c *execution.Config) { c.ID = "w-one"; c.Queues = []string{"default", "other"} })
	j := f.submit(acmeKey, `{"kind": "slow"}`)
	f.awaitState(j.ID, job.StateRunning)
	running := decode[job.Job](t, f.get(acmeKey, "/v1/jobs/"+j.ID)) // as acme sees it

	var admin httpapi.WorkerList
	testenv.Eventually(t, 10*time.Second, func() bool {
		admin = decode[httpapi.WorkerList](t, f.get(adminKey, "/v1/workers"))
		return len(admin.Workers) == 1 && admin.Workers[0].Running == 1
	}, "the admin does not see the worker running a job")
	w := admin.Workers[0]
	if w.ID != "w-one" || w.Host == "" || len(w.Queues) != 2 || len(w.Kinds) != 2 || w.Kinds[0] != "echo" ||
		w.StartedAt.IsZero() || w.HeartbeatAt.Before(w.StartedAt.Add(-time.Second)) {
		t.Fatalf("the admin sees %+v", w)
	}
	acme := decode[httpapi.WorkerList](t, f.get(acmeKey, "/v1/workers"))
	if len(acme.Workers) != 1 || acme.Workers[0].ID != running.Execution.Worker || acme.Workers[0].Host != "" ||
		acme.Workers[0].Running != 1 {
		t.Fatalf("acme sees %+v, want its job's worker %s without its host", acme.Workers, running.Execution.Worker)
	}
	if globex := decode[httpapi.WorkerList](t, f.get(globexKey, "/v1/workers")); len(globex.Workers) != 0 {
		t.Fatalf("globex, which runs nothing, sees %+v", globex.Workers)
	}

	close(release)
	stop()
	if gone := decode[httpapi.WorkerList](t, f.get(adminKey, "/v1/workers")); len(gone.Workers) != 0 {
		t.Fatalf("a stopped worker is still listed: %+v", gone.Workers)
	}
}

// A queued job of a kind that no live worker of its queue serves shows
// blocked_by, spends no attempt, and runs once a worker that serves its
// kind starts; a queued job that a live worker serves shows none.
//
// Fails when blocked_by is missing, or shown for a kind a worker serves.
func TestQueuedJobOfAKindNoWorkerServesShowsBlockedBy(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	release := make(chan struct{})
	f.startWorker(map[string]execution.Handler{
		"slow": func(ctx context.Context, _ *execution.Execution) (any, error) {
			select {
			case <-release:
			case <-ctx.Done():
			}
			return nil, nil
		},
	}, func(c *execution.Config) { c.Concurrency = 1 })
	first := f.submit(acmeKey, `{"kind": "slow"}`)
	f.awaitState(first.ID, job.StateRunning)
	second := f.submit(acmeKey, `{"kind": "slow"}`) // waits for the worker's one slot
	lonely := f.submit(acmeKey, `{"kind": "gamma", "max_attempts": 1}`)

	var got job.Job
	testenv.Eventually(t, 10*time.Second, func() bool {
		got = decode[job.Job](t, f.get(acmeKey, "/v1/jobs/"+lonely.ID))
		return got.BlockedBy != nil
	}, "the gamma job shows no blocked_by")
	if got.State != job.StateQueued || got.Attempt != 0 || got.BlockedBy.Kind != "gamma" || got.BlockedBy.Reason != "no live worker serves it" {
		t.Fatalf("the gamma job: %+v, blocked by %+v", got, got.BlockedBy)
	}
	resp := f.get(acmeKey, "/v1/jobs/"+second.ID)
	if resp.StatusCode != http.StatusOK || decode[map[string]any](t, resp)["blocked_by"] != nil {
		t.Fatalf("a queued job that a live worker serves shows blocked_by: %s", resp.body)
	}

	f.startWorker(map[string]execution.Handler{"gamma": func(context.Context, *execution.Execution) (any, error) { return nil, nil }})
	if done := f.awaitState(lonely.ID, job.StateSucceeded); done.Attempt != 1 {
		t.Fatalf("the gamma job succeeded at attempt %d, want 1", done.Attempt)
	}
	close(release)
}

// With Config.Kinds (LEASEHOLD_KINDS) a job of another kind is refused
// with a 400 naming kind, at submit, as a batch's item and as a
// schedule's job, and nothing is written; a listed kind is accepted.
//
// Fails when an unlisted kind is accepted anywhere a job is submitted.
func TestKindsRefuseAnUnlistedKind(t *testing.T) {
	t.Parallel()
	f := newFixture(t, func(c *httpapi.Config) { c.Kinds = []string{"echo", "sleep"} })
	expectProblem(t, f.do(request{method: http.MethodPost, path: "/v1/jobs", key: acmeKey, body: `{"kind": "ehco"}`}),
		http.StatusBadRequest, "kind")
	entries := f.batch(acmeKey, `{"kind": "echo"}`, `{"kind": "ehco"}`)
	if got := statuses(entries); !slices.Equal(got, []int{http.StatusCreated, http.StatusBadRequest}) ||
		!strings.Contains(string(entries[1].Problem), `"kind"`) {
		t.Fatalf("batch: %v, %s", got, entries[1].Problem)
	}
	expectProblem(t, f.postBody(acmeKey, "/v1/schedules", `{"name": "a", "cron": "@hourly", "job": {"kind": "ehco"}}`),
		http.StatusBadRequest, "job.kind")
	if n := len(f.list(acmeKey)); n != 1 {
		t.Fatalf("%d jobs, want the batch's one valid item", n)
	}
	if resp := f.do(request{method: http.MethodPost, path: "/v1/jobs", key: acmeKey, body: `{"kind": "echo"}`}); resp.StatusCode != http.StatusCreated {
		t.Fatalf("a listed kind: %s %s", resp.Status, resp.body)
	}
}
