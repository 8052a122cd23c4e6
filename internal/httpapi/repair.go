package httpapi

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/leasehold/leasehold/job"
)

// bulkRetryBudget is how long a bulk retry call may work on Redis. A call
// moves at most job.RetryPageMax jobs and reads a bounded number of index
// entries, a few hundred per round trip, so it needs far less; past it the
// answer is 503, and running the call again goes on where it stopped,
// since it moves only jobs that are still ended.
const bulkRetryBudget = 30 * time.Second

// POST /v1/jobs/{id}/retry: a retry counts like a submission (API.md,
// retry): it spends a unit of the tenant's submission rate and counts
// against its cap of jobs not ended, checked with the move. The admin's
// retries are neither counted nor capped.
func (s *server) retryJob(w http.ResponseWriter, r *http.Request, c caller) {
	ctx, stop := s.redisContext(r.Context(), 0)
	defer stop()
	if !c.admin {
		if err := s.limit(ctx, w, c.tenant, ""); err != nil {
			s.fail(w, r, err)
			return
		}
	}
	j, err := s.store.RetryWithin(ctx, c.tenant, r.PathValue("id"), c.admin, s.capOf())
	if errors.Is(err, job.ErrNotRetryable) {
		writeConflict(w, s.shown(c, j), "the job is "+string(j.State)+"; only a failed, cancelled or expired job can be retried")
		return
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.wake(r, j.Queue)
	writeJSON(w, http.StatusAccepted, s.shown(c, j))
}

// capOf is the cap on a tenant's jobs not ended (LEASEHOLD_TENANT_MAX_JOBS)
// and on their retained bytes (LEASEHOLD_TENANT_MAX_RETAINED_BYTES).
func (s *server) capOf() job.Cap {
	return job.Cap{Max: s.tenantCap, MaxBytes: s.tenantQuota, Queues: s.queues}
}

// retryFilter is the body of POST /v1/jobs/retry.
type retryFilter struct {
	State  job.State `json:"state"`
	Kind   string    `json:"kind"`
	Queue  string    `json:"queue"`
	Tenant *string   `json:"tenant"`
	Cursor string    `json:"cursor"`
}

// retried is the answer of POST /v1/jobs/retry.
type retried struct {
	Moved      int            `json:"moved"`
	Queues     map[string]int `json:"queues"`
	NextCursor *string        `json:"next_cursor"`
}

// POST /v1/jobs/retry: retry the ended jobs a filter selects, at most
// job.RetryPageMax a call; next_cursor continues. One call per tenant at a
// time, fleet-wide: another meanwhile is a 409 (job.ErrRetryRunning).
// Each job a tenant's call moves counts like a submission: a unit of its
// rate, a job against its cap; when either stops the call it answers what
// it moved with next_cursor, or 429 when it moved none.
func (s *server) retryJobs(w http.ResponseWriter, r *http.Request, c caller) {
	body, err := readJSONBody(w, r, s.maxBody)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	var b retryFilter
	if _, err := decodeInto(body, &b); err != nil {
		s.fail(w, r, err)
		return
	}
	f := job.RetryFilter{Tenant: c.tenant, Admin: c.admin, State: b.State, Kind: b.Kind, Queue: b.Queue, Cursor: b.Cursor}
	if c.admin {
		f.Tenant = "" // every tenant, unless the body names one
	}
	if b.Tenant != nil {
		switch {
		case c.admin:
			f.Tenant = *b.Tenant
		case *b.Tenant != c.tenant:
			s.fail(w, r, fieldError("tenant", "only the admin tenant may retry another tenant's jobs"))
			return
		}
	}
	if !c.admin {
		f.Cap = s.capOf()
		f.Admit = func(ctx context.Context, n int) (int, error) {
			ok, err := s.admit(ctx, w, c.tenant, make([]string, n)) // no idempotency keys: each job is new work
			granted := 0
			for granted < len(ok) && ok[granted] {
				granted++
			}
			if err == nil && granted < n {
				err = errRateLimited
			}
			return granted, err
		}
	}
	ctx, stop := s.redisContext(r.Context(), bulkRetryBudget)
	defer stop()
	page, err := s.store.RetryAll(ctx, f)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := retried{Queues: page.Moved}
	if page.Next != "" {
		out.NextCursor = &page.Next
	}
	for q, n := range page.Moved {
		out.Moved += n
		s.wake(r, q)
	}
	writeJSON(w, http.StatusOK, out)
}

// DELETE /v1/jobs/{id}
func (s *server) deleteJob(w http.ResponseWriter, r *http.Request, c caller) {
	ctx, stop := s.redisContext(r.Context(), 0)
	defer stop()
	j, err := s.store.Delete(ctx, c.tenant, r.PathValue("id"), c.admin)
	if errors.Is(err, job.ErrNotEnded) {
		writeConflict(w, s.shown(c, j), "the job is "+string(j.State)+"; only a job that ended can be deleted")
		return
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusNoContent)
}

// POST /v1/queues/{name}/pause and /resume, admin only; anyone else gets
// the 404 of an unknown path.
func (s *server) pauseQueue(paused bool) func(http.ResponseWriter, *http.Request, caller) {
	return func(w http.ResponseWriter, r *http.Request, c caller) {
		if !c.admin {
			notFound(w, r)
			return
		}
		ctx, stop := s.redisContext(r.Context(), 0)
		defer stop()
		q, err := s.store.Pause(ctx, r.PathValue("name"), paused)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		if !paused {
			s.wake(r, q.Name) // idle workers need not wait for their poll
		}
		writeJSON(w, http.StatusOK, q)
	}
}

// queueMinutes is the answer of GET /v1/queues/{name}/stats.
type queueMinutes struct {
	Name    string       `json:"name"`
	Minutes []job.Minute `json:"minutes"`
}

// GET /v1/queues/{name}/stats, admin only: the counts are of every tenant.
func (s *server) queueFinished(w http.ResponseWriter, r *http.Request, c caller) {
	if !c.admin {
		notFound(w, r)
		return
	}
	ctx, stop := s.redisContext(r.Context(), 0)
	defer stop()
	name := r.PathValue("name")
	minutes, err := s.store.Finished(ctx, name)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, queueMinutes{Name: name, Minutes: minutes})
}

// wake tells one idle worker of queue that a job may be waiting there.
func (s *server) wake(r *http.Request, queue string) { s.waker.Wake(r.Context(), queue) }
