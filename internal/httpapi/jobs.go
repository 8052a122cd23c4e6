package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/leasehold/leasehold/execution"
	"github.com/leasehold/leasehold/job"
)

// POST /v1/jobs
func (s *server) submitJob(w http.ResponseWriter, r *http.Request, c caller) {
	idemKey, err := idempotencyKey(r.Header)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	body, err := readJSONBody(w, r, s.maxBody)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	sub, err := decodeSubmission(body)
	if err != nil {
		s.fail(w, r, err)
		return
	}

	ctx, stop := s.redisContext(r.Context(), 0)
	defer stop()
	j, created, err := s.store.Submit(ctx, c.tenant, sub, idemKey)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if !created {
		writeJSON(w, http.StatusOK, j) // an idempotent replay
		return
	}
	if s.nc != nil {
		if err := execution.Wake(s.nc, s.prefix, j.Queue); err != nil {
			s.log.DebugContext(ctx, "wake-up not sent; workers find the job when they poll", attrJobID, j.ID, attrQueue, j.Queue, attrErr, err)
		}
	}
	w.Header().Set("Location", "/v1/jobs/"+j.ID)
	writeJSON(w, http.StatusCreated, j)
}

// idempotencyKey returns the request's Idempotency-Key, "" when it has
// none. A header that is present must hold one key: an empty or repeated
// one is refused rather than taken for none.
func idempotencyKey(h http.Header) (string, error) {
	values, ok := h["Idempotency-Key"]
	switch {
	case !ok:
		return "", nil
	case len(values) != 1 || values[0] == "":
		return "", fieldError("Idempotency-Key", "must be given once, 1 to 255 printable ASCII characters")
	}
	return values[0], nil // the store checks the characters
}

// GET /v1/jobs/{id}
func (s *server) getJob(w http.ResponseWriter, r *http.Request, c caller) {
	wait, err := parseWait(r.URL.Query())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	id := r.PathValue("id")
	j, err := s.get(r.Context(), c, id)
	if err == nil && wait > 0 && !j.State.Terminal() {
		j, err = s.awaitEnd(r.Context(), c, id, wait)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, j)
}

// parseWait reads ?wait=, a Go duration up to MaxWait; 0 when absent.
func parseWait(q url.Values) (time.Duration, error) {
	if !q.Has("wait") {
		return 0, nil
	}
	d, err := time.ParseDuration(q.Get("wait"))
	if err != nil || d < 0 || d > MaxWait {
		return 0, fieldError("wait", fmt.Sprintf(`must be a duration from "0s" to "%s", such as "30s"`, MaxWait))
	}
	return d, nil
}

func (s *server) get(ctx context.Context, c caller, id string) (job.Job, error) {
	ctx, stop := s.redisContext(ctx, 0)
	defer stop()
	return s.store.Get(ctx, c.tenant, id, c.admin)
}

// awaitEnd waits up to wait for job id to reach a terminal state, then
// returns the job as it stands. It sleeps in XREAD BLOCK on the job's
// events: the first read returns the stream so far, which holds the
// terminal event if the job ended since the caller read it, and each
// later read blocks for the events after the last one seen.
func (s *server) awaitEnd(ctx context.Context, c caller, id string, wait time.Duration) (job.Job, error) {
	deadline := time.Now().Add(wait)
	after := ""
	for {
		left := time.Until(deadline)
		if left <= 0 {
			break
		}
		events, err := s.events(ctx, c, id, after, left)
		if err != nil {
			return job.Job{}, err
		}
		if ended(events) {
			break
		}
		if len(events) > 0 {
			after = events[len(events)-1].ID
		}
	}
	return s.get(ctx, c, id)
}

// events reads job id's events after the event id after, waiting up to
// block for some when there are none yet.
func (s *server) events(ctx context.Context, c caller, id, after string, block time.Duration) ([]job.Event, error) {
	ctx, stop := s.redisContext(ctx, block)
	defer stop()
	return s.store.Events(ctx, c.tenant, id, c.admin, after, block)
}

// ended reports whether events hold a terminal state event.
func ended(events []job.Event) bool {
	for _, e := range events {
		if st, ok := eventState(e); ok && st.State.Terminal() {
			return true
		}
	}
	return false
}

// stateEvent is a state event's data as the stream stores it.
type stateEvent struct {
	State   job.State `json:"state"`
	Attempt int       `json:"attempt"`
}

// eventState returns the data of a state event; ok is false for other
// events.
func eventState(e job.Event) (st stateEvent, ok bool) {
	if e.Type != "state" {
		return st, false
	}
	return st, json.Unmarshal(e.Data, &st) == nil
}

// jobList is the body of GET /v1/jobs.
type jobList struct {
	Jobs       []job.Job `json:"jobs"`
	NextCursor *string   `json:"next_cursor"`
}

// GET /v1/jobs
func (s *server) listJobs(w http.ResponseWriter, r *http.Request, c caller) {
	q, err := listQuery(r.URL.Query(), c)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	ctx, stop := s.redisContext(r.Context(), 0)
	defer stop()
	jobs, next, err := s.store.List(ctx, q)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	list := jobList{Jobs: jobs}
	if list.Jobs == nil {
		list.Jobs = []job.Job{}
	}
	if next != "" {
		list.NextCursor = &next
	}
	writeJSON(w, http.StatusOK, list)
}

// listQuery reads the query of a listing for c. The store validates the
// values; only their form is checked here.
func listQuery(v url.Values, c caller) (job.ListQuery, error) {
	q := job.ListQuery{
		Tenant: c.tenant,
		Admin:  c.admin,
		State:  job.State(v.Get("state")),
		Kind:   v.Get("kind"),
		Queue:  v.Get("queue"),
		Cursor: v.Get("cursor"),
	}
	if v.Has("limit") {
		n, err := strconv.Atoi(v.Get("limit"))
		if err != nil || n < 1 {
			return q, fieldError("limit", "must be an integer from 1 to 500")
		}
		q.Limit = n
	}
	if v.Has("tenant") {
		switch t := v.Get("tenant"); {
		case c.admin:
			q.Tenant = t // "" lists every tenant
		case t != c.tenant:
			return q, fieldError("tenant", "only the admin tenant may list another tenant's jobs")
		}
	} else if c.admin {
		q.Tenant = ""
	}
	return q, nil
}

// POST /v1/jobs/{id}/cancel
func (s *server) cancelJob(w http.ResponseWriter, r *http.Request, c caller) {
	id := r.PathValue("id")
	ctx, stop := s.redisContext(r.Context(), 0)
	defer stop()
	j, err := s.store.Cancel(ctx, c.tenant, id, c.admin)
	if errors.Is(err, job.ErrConflict) {
		writeConflict(w, j)
		return
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	// A running job stops when its owner learns of the request: set the
	// flag it polls, and publish the fast-path message. This runs on every
	// cancel of a running job, so a retry after a failed flag write
	// completes the request.
	if j.State == job.StateRunning && j.CancelRequested {
		if err := s.flags.Request(ctx, j.ID, flagTTL(j)); err != nil {
			s.fail(w, r, err)
			return
		}
	}
	writeJSON(w, http.StatusAccepted, j)
}

// flagTTL is how long a cancel flag must live: as long as the job can
// still run, which is its timeout for the current attempt and every one
// left, plus time for backoff; at least an hour.
func flagTTL(j job.Job) time.Duration {
	left := time.Duration(max(j.MaxAttempts-j.Attempt, 0) + 1)
	return max(time.Hour, j.Timeout*left+10*time.Minute)
}

// queueList is the body of GET /v1/queues.
type queueList struct {
	Queues []job.QueueStats `json:"queues"`
}

// GET /v1/queues
func (s *server) listQueues(w http.ResponseWriter, r *http.Request, _ caller) {
	ctx, stop := s.redisContext(r.Context(), 0)
	defer stop()
	stats, err := s.store.Stats(ctx)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if stats == nil {
		stats = []job.QueueStats{}
	}
	writeJSON(w, http.StatusOK, queueList{Queues: stats})
}
