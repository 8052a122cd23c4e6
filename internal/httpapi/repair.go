package httpapi

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/leasehold/leasehold/execution"
	"github.com/leasehold/leasehold/job"
)

// bulkRetryBudget is how long a bulk retry call may work on Redis. A call
// moves at most job.RetryPageMax jobs and reads a bounded number of index
// entries, a few hundred per round trip, so it needs far less; past it the
// answer is 503, and running the call again goes on where it stopped,
// since it moves only jobs that are still ended.
const bulkRetryBudget = 30 * time.Second

// POST /v1/jobs/{id}/retry
func (s *server) retryJob(w http.ResponseWriter, r *http.Request, c caller) {
	ctx, stop := s.redisContext(r.Context(), 0)
	defer stop()
	if _, err := s.admitRetry(ctx, w, c); err != nil {
		s.fail(w, r, err)
		return
	}
	j, err := s.store.Retry(ctx, c.tenant, r.PathValue("id"), c.admin)
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

// admitRetry counts a retry like a submission (API.md, retry): for a
// tenant at its cap of jobs not ended it returns a *job.CapError, over its
// submission rate errRateLimited (one unit per call). Otherwise it returns
// how many jobs the call may move, the room under the cap (0: no cap).
// The admin's retries are neither capped nor counted (its submissions
// are capped like any tenant's).
func (s *server) admitRetry(ctx context.Context, w http.ResponseWriter, c caller) (int, error) {
	if c.admin {
		return 0, nil
	}
	room := 0
	if s.tenantCap > 0 {
		n, err := s.store.Unended(ctx, c.tenant, s.queues)
		if err != nil {
			return 0, err
		}
		if n >= s.tenantCap {
			return 0, &job.CapError{Jobs: n, Max: s.tenantCap}
		}
		room = int(s.tenantCap - n)
	}
	return room, s.limit(ctx, w, c.tenant, "")
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
	ctx, stop := s.redisContext(r.Context(), bulkRetryBudget)
	defer stop()
	if f.Max, err = s.admitRetry(ctx, w, c); err != nil {
		s.fail(w, r, err)
		return
	}
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
func (s *server) wake(r *http.Request, queue string) {
	if s.nc == nil {
		return
	}
	if err := execution.Wake(s.nc, s.prefix, queue); err != nil {
		s.log.DebugContext(r.Context(), "wake-up not sent; workers find the job when they poll", attrQueue, queue, attrErr, err)
	}
}
