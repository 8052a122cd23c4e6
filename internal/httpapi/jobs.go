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

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/leasehold/leasehold/execution"
	"github.com/leasehold/leasehold/job"
	"github.com/leasehold/leasehold/ratelimit"
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
	sub, given, err := decodeSubmission(body)
	if err == nil {
		err = sub.ValidateGiven(given)
	}
	if err == nil {
		err = s.checkQueue(sub)
	}
	if err == nil {
		err = s.checkInput(c.tenant, sub)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}

	ctx, stop := s.redisContext(r.Context(), 0)
	defer stop()
	if err := s.limit(ctx, w, c.tenant, idemKey); err != nil {
		s.fail(w, r, err)
		return
	}
	j, created, err := s.store.SubmitWithin(ctx, c.tenant, sub, idemKey, s.capOf())
	s.countRejection(ctx, err)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if !created {
		writeJSON(w, http.StatusOK, s.shown(c, j)) // an idempotent replay
		return
	}
	s.wake(r, j.Queue)
	w.Header().Set("Location", "/v1/jobs/"+j.ID)
	writeJSON(w, http.StatusCreated, s.shown(c, j))
}

// countRejection counts a submission refused with err because a
// concurrency key was full (on_busy "reject"); any other err is not one.
func (s *server) countRejection(ctx context.Context, err error) {
	if busy := (*job.BusyError)(nil); errors.As(err, &busy) {
		s.metrics.rejections.Add(context.WithoutCancel(ctx), 1, metric.WithAttributes(attribute.String("key", busy.Label)))
	}
}

// idempotencyKey returns the request's Idempotency-Key, "" when it has
// none. A header that is present must hold one key of 1 to 255 printable
// ASCII characters: an empty or repeated one is refused rather than taken
// for none. (The store checks the characters too; checking them here
// refuses a bad key before the rate limit counts the request.)
func idempotencyKey(h http.Header) (string, error) {
	values, ok := h["Idempotency-Key"]
	switch {
	case !ok:
		return "", nil
	case len(values) != 1 || !printableASCII(values[0], 255):
		return "", fieldError("Idempotency-Key", "must be given once, 1 to 255 printable ASCII characters")
	}
	return values[0], nil
}

// printableASCII reports whether s is 1 to max characters from 0x20 to 0x7e.
func printableASCII(s string, max int) bool {
	if len(s) < 1 || len(s) > max {
		return false
	}
	for i := range len(s) {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// errRateUnavailable wraps a rate limiter's error: the limiter made no
// decision because Redis did not answer, which is a 503, never a 429.
var errRateUnavailable = errors.New("httpapi: the rate limiter did not answer")

// errRateLimited is a submission over its tenant's rate: 429.
var errRateLimited = errors.New("httpapi: tenant over its submission rate")

// limit spends one unit of tenant's submission rate for a request with
// idempotency key idemKey ("" = none), and sets the RateLimit headers of
// the answer; it returns errRateLimited when the limiter refuses (see
// admit).
func (s *server) limit(ctx context.Context, w http.ResponseWriter, tenant, idemKey string) error {
	ok, err := s.admit(ctx, w, tenant, []string{idemKey})
	if err == nil && !ok[0] {
		err = errRateLimited
	}
	return err
}

// admit spends one unit of tenant's submission rate for each new job of
// requests with idempotency keys idemKeys ("" = none), in order, as far as
// the rate allows, and sets the RateLimit headers of the answer (with
// Retry-After when it refused one). ok[i] says whether the i-th may go
// ahead. An error wrapping errRateUnavailable means the limiter could not
// decide.
//
// It runs after the requests are decoded and validated, so a request the
// API refuses anyway (400, 413, 415) spends nothing, and a client is told
// what to fix before it is told to wait. An idempotent replay spends
// nothing either: when a request's Idempotency-Key already has a record
// for the tenant, it creates no job, so it goes ahead free (and a replay
// alone carries no RateLimit headers). Concurrent first requests with one
// key all find no record, so each may spend a unit although only one job
// is created. A replay whose body differs (422) is also not counted.
//
// The limiter grants n units at once or none: admit asks for one, then
// for as many more as the decision says remain, and so on, a few round
// trips however many jobs; a shadowed limit (which refuses nothing) is
// asked for up to its whole limit at a time.
func (s *server) admit(ctx context.Context, w http.ResponseWriter, tenant string, idemKeys []string) (ok []bool, err error) {
	ok = make([]bool, len(idemKeys))
	if s.rate == nil {
		for i := range ok {
			ok[i] = true
		}
		return ok, nil
	}
	var fresh []int // the requests that would create a job
	replays, err := s.store.Replays(ctx, tenant, idemKeys)
	if err != nil {
		return nil, err
	}
	for i := range idemKeys {
		if replays[i] {
			ok[i] = true // a replay: the store answers with the first job
		} else {
			fresh = append(fresh, i)
		}
	}
	granted, ask := 0, 1
	var d ratelimit.Decision
	for granted < len(fresh) {
		d, err = s.allow(ctx, tenant, ask)
		switch {
		case errors.Is(err, ratelimit.ErrInvalid):
			return nil, fmt.Errorf("httpapi: rate limit: %w", err) // a bug: 500
		case err != nil:
			return nil, fmt.Errorf("%w: %w", errRateUnavailable, err)
		}
		if !d.Allowed {
			if ask == 1 {
				break
			}
			ask = max(1, min(ask-1, d.Remaining)) // others took some meanwhile
			continue
		}
		for _, i := range fresh[granted : granted+ask] {
			ok[i] = true
		}
		granted += ask
		next := max(1, d.Remaining)
		if d.Shadowed {
			next = d.Limit
		}
		ask = min(len(fresh)-granted, next)
	}
	if len(fresh) > 0 {
		ratelimit.Headers(w.Header(), d)
	}
	return ok, nil
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
		if err = s.streams.take(c.tenant); err == nil {
			j, err = s.awaitEnd(r.Context(), c, id, wait)
			s.streams.give(c.tenant)
		}
	}
	if err == nil {
		j.BlockedBy, err = s.blockedBy(r.Context(), j)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, s.shown(c, j))
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
		if ended(events) && len(events) < job.EventsPage { // a full page may have a retry after it
			break
		}
		if len(events) > 0 {
			after = events[len(events)-1].ID
		}
	}
	return s.get(ctx, c, id)
}

// events reads job id's events after the event id after, waiting up to
// block for some when there are none yet: on the blocking client then.
func (s *server) events(ctx context.Context, c caller, id, after string, block time.Duration) ([]job.Event, error) {
	ctx, stop := s.redisContext(ctx, block)
	defer stop()
	store := s.store
	if block > 0 {
		store = s.blocking
	}
	return store.Events(ctx, c.tenant, id, c.admin, after, block)
}

// ended reports whether the last state event of events is terminal. An
// earlier one is not the end: the job was retried after it.
func ended(events []job.Event) bool {
	last := lastState(events)
	return last >= 0 && mustState(events[last]).Terminal()
}

// lastState returns the index of the last state event of events, -1 when
// there is none.
func lastState(events []job.Event) int {
	for i := len(events) - 1; i >= 0; i-- {
		if _, ok := eventState(events[i]); ok {
			return i
		}
	}
	return -1
}

// mustState returns the state of e, a state event.
func mustState(e job.Event) job.State {
	st, _ := eventState(e)
	return st.State
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
	list := jobList{Jobs: make([]job.Job, len(jobs))}
	for i, j := range jobs {
		list.Jobs[i] = s.shown(c, j)
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
	var err error
	if q.Limit, err = queryLimit(v); err != nil {
		return q, err
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

// queryLimit reads a listing's ?limit=, 0 when it has none (the store's
// default). Its form is checked here, its bound (500, as for every
// listing) by the store.
func queryLimit(v url.Values) (int, error) {
	if !v.Has("limit") {
		return 0, nil
	}
	n, err := strconv.Atoi(v.Get("limit"))
	if err != nil || n < 1 {
		return 0, fieldError("limit", "must be an integer from 1 to 500")
	}
	return n, nil
}

// POST /v1/jobs/{id}/cancel
func (s *server) cancelJob(w http.ResponseWriter, r *http.Request, c caller) {
	id := r.PathValue("id")
	ctx, stop := s.redisContext(r.Context(), 0)
	defer stop()
	j, err := execution.CancelJob(ctx, s.store, s.flags, c.tenant, id, c.admin)
	if errors.Is(err, job.ErrConflict) {
		writeConflict(w, s.shown(c, j), "the job already ended "+string(j.State)+"; it cannot be cancelled")
		return
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusAccepted, s.shown(c, j))
}

// queueList is the body of GET /v1/queues.
type queueList struct {
	Queues []job.QueueStats `json:"queues"`
}

// GET /v1/queues: a tenant sees the counts of its own jobs, the admin
// everyone's.
func (s *server) listQueues(w http.ResponseWriter, r *http.Request, c caller) {
	ctx, stop := s.redisContext(r.Context(), 0)
	defer stop()
	var stats []job.QueueStats
	var err error
	if c.admin {
		stats, err = s.store.Stats(ctx)
	} else {
		stats, err = s.store.TenantStats(ctx, c.tenant)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if stats == nil {
		stats = []job.QueueStats{}
	}
	writeJSON(w, http.StatusOK, queueList{Queues: stats})
}
