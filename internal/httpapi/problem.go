package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"

	"github.com/leasehold/leasehold/internal/store"
	"github.com/leasehold/leasehold/job"
	"github.com/leasehold/leasehold/schedule"
)

// retryAfter is the Retry-After of a 503, in seconds: about one Redis
// timeout, long enough for a restart or a failover to show.
const retryAfter = 2

// streamRetryAfter is the Retry-After of a 429 for too many streams, in
// seconds: streams and waits last long, so a client should not spin.
const streamRetryAfter = 5

// batchRetryAfter is the Retry-After of a batch refused for the batches
// in flight, in seconds: a batch holds its slot for well under one.
const batchRetryAfter = 1

// capRetryAfter is the Retry-After of a 429 for a tenant at its cap of
// jobs not ended, in seconds: jobs end in their own time, which the API
// cannot tell, so a client should not spin.
const capRetryAfter = 5

// bulkRetryRetryAfter is the Retry-After of the 409 for a second bulk
// retry of one tenant, in seconds: a call takes a few seconds at most.
const bulkRetryRetryAfter = 2

// problem is an RFC 9457 problem detail, the body of every error. Type is
// always about:blank, so Title is the status's own phrase; Errors lists
// the fields at fault (empty when no field is).
type problem struct {
	Type   string           `json:"type"`
	Title  string           `json:"title"`
	Status int              `json:"status"`
	Detail string           `json:"detail"`
	Errors []job.FieldError `json:"errors"`
}

func newProblem(status int, detail string, fields []job.FieldError) problem {
	if fields == nil {
		fields = []job.FieldError{}
	}
	return problem{Type: "about:blank", Title: http.StatusText(status), Status: status, Detail: detail, Errors: fields}
}

// writeProblem answers with a problem; fields name the bad parts of the
// request.
func writeProblem(w http.ResponseWriter, status int, detail string, fields ...job.FieldError) {
	body, err := json.Marshal(newProblem(status, detail, fields))
	if err != nil { // a problem is plain strings and ints
		panic(err)
	}
	writeBody(w, status, "application/problem+json", body)
}

// writeConflict answers 409 to a request the job's state does not allow
// (cancel of a job that ended, retry of one that did not fail, delete of
// one that did not end): a problem with detail whose extension members
// are the job object's, so a client can read the body as a problem or as
// the job. The two share no member name.
func writeConflict(w http.ResponseWriter, j job.Job, detail string) {
	members := map[string]json.RawMessage{}
	for _, v := range []any{j, newProblem(http.StatusConflict, detail, nil)} {
		b, err := json.Marshal(v)
		if err == nil {
			err = json.Unmarshal(b, &members)
		}
		if err != nil {
			panic(err) // both are plain JSON objects
		}
	}
	body, _ := json.Marshal(members)
	writeBody(w, http.StatusConflict, "application/problem+json", body)
}

// writeJSON answers with v as JSON.
func writeJSON(w http.ResponseWriter, status int, v any) {
	writeBody(w, status, "application/json", marshal(v))
}

// marshal is v, an API type, as JSON: API types always marshal.
func marshal(v any) []byte {
	body, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return body
}

func writeBody(w http.ResponseWriter, status int, contentType string, body []byte) {
	h := w.Header()
	h.Set("Content-Type", contentType)
	h.Set("Content-Length", strconv.Itoa(len(body)+1))
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n'))
}

// badRequest is a request the client must fix: a 400 with its detail and
// the fields at fault.
type badRequest struct {
	detail string
	fields []job.FieldError
}

func (e *badRequest) Error() string { return e.detail }

// fieldError is a 400 about one field.
func fieldError(field, message string) *badRequest {
	return &badRequest{detail: "invalid " + field + ": " + message, fields: []job.FieldError{{Field: field, Message: message}}}
}

// fail answers a request that failed with err. It is the one place that
// maps errors to statuses: the request's own faults to 4xx, Redis
// trouble to 503 with Retry-After, and anything else, a bug, to 500.
// (Only a 409 with its job is written where it happens, by writeConflict.)
func (s *server) fail(w http.ResponseWriter, r *http.Request, err error) {
	var bad *badRequest
	var invalid *job.ValidationError
	var tooLarge *http.MaxBytesError
	var busy *job.BusyError
	var capped *job.CapError
	var quota *job.QuotaError
	var tooMany *schedule.CapError
	switch {
	case errors.Is(err, errUnsupportedMedia):
		writeProblem(w, http.StatusUnsupportedMediaType, "the body must be JSON, sent with Content-Type: application/json")
	case errors.As(err, &tooLarge):
		writeProblem(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("the body is larger than %d bytes", tooLarge.Limit))
	case errors.Is(err, errBodyTimeout):
		writeProblem(w, http.StatusRequestTimeout, "the body did not arrive in time")
	case errors.As(err, &bad):
		writeProblem(w, http.StatusBadRequest, bad.detail, bad.fields...)
	case errors.As(err, &invalid):
		writeProblem(w, http.StatusBadRequest, "the request is invalid: see errors", invalid.Errors...)
	case errors.Is(err, job.ErrNotFound):
		// The same words for a missing job and another tenant's.
		writeProblem(w, http.StatusNotFound, "no such job")
	case errors.Is(err, job.ErrNoQueue):
		writeProblem(w, http.StatusNotFound, "no such queue")
	case errors.Is(err, job.ErrBadCursor):
		writeProblem(w, http.StatusBadRequest, "invalid cursor", job.FieldError{Field: "cursor", Message: "is not a cursor this API handed out"})
	case errors.Is(err, job.ErrIdempotencyConflict):
		writeProblem(w, http.StatusUnprocessableEntity, "this Idempotency-Key was used with a different request body",
			job.FieldError{Field: "Idempotency-Key", Message: "already used with a different body"})
	case errors.Is(err, job.ErrDeleted):
		writeProblem(w, http.StatusConflict, "the job this Idempotency-Key created was deleted; send a new key to submit it again",
			job.FieldError{Field: "Idempotency-Key", Message: "stands for a deleted job"})
	case errors.Is(err, job.ErrRetryRunning):
		// Not a rate: the tenant's other bulk retry holds the way until it
		// answers, on whichever API process runs it.
		w.Header().Set("Retry-After", strconv.Itoa(bulkRetryRetryAfter))
		writeProblem(w, http.StatusConflict, "a bulk retry of this tenant is already running; retry once it has answered")
	case errors.As(err, &busy):
		w.Header().Set("Retry-After", strconv.Itoa(max(1, int(math.Ceil(busy.RetryAfter.Seconds())))))
		writeProblem(w, http.StatusTooManyRequests, "a concurrency key of this job is full and it asked to be rejected then; retry after Retry-After seconds",
			job.FieldError{Field: "concurrency_keys", Message: busy.Key + " is full"})
	case errors.As(err, &capped):
		w.Header().Set("Retry-After", strconv.Itoa(capRetryAfter))
		writeProblem(w, http.StatusTooManyRequests, fmt.Sprintf("tenant has %d jobs not ended, the cap is %d; retry once some have ended", capped.Jobs, capped.Max))
	case errors.As(err, &quota):
		w.Header().Set("Retry-After", strconv.Itoa(capRetryAfter))
		writeProblem(w, http.StatusTooManyRequests, fmt.Sprintf("tenant's jobs hold %d bytes, the quota is %d; retry once some are deleted or past their retention", quota.Bytes, quota.Max))
	case errors.Is(err, errTooManyBatches):
		w.Header().Set("Retry-After", strconv.Itoa(batchRetryAfter))
		writeProblem(w, http.StatusTooManyRequests, "this tenant has as many batches in flight as it may; retry after Retry-After seconds")
	case errors.Is(err, errBatchesFull):
		w.Header().Set("Retry-After", strconv.Itoa(batchRetryAfter))
		writeProblem(w, http.StatusServiceUnavailable, "this process holds as many batches as it may; retry after Retry-After seconds")
	case errors.As(err, &tooMany):
		// No Retry-After: time frees nothing, deleting a schedule does.
		writeProblem(w, http.StatusTooManyRequests, fmt.Sprintf("tenant has %d schedules, the most it may have; delete one to create another", tooMany.Max),
			job.FieldError{Field: "name", Message: "is one schedule more than the tenant may have"})
	case errors.Is(err, errTooManyStreams):
		w.Header().Set("Retry-After", strconv.Itoa(streamRetryAfter))
		writeProblem(w, http.StatusTooManyRequests, "this tenant has as many event streams and ?wait= requests open as it may; close one, or retry after Retry-After seconds")
	case errors.Is(err, errRateLimited):
		// Retry-After and the RateLimit headers are set by limit.
		writeProblem(w, http.StatusTooManyRequests, "this tenant is over its submission rate; retry after Retry-After seconds")
	case r.Context().Err() != nil:
		// The client left; nobody reads an answer.
		s.log.DebugContext(r.Context(), "request abandoned by the client", attrErr, err)
	case unavailable(err):
		s.log.WarnContext(r.Context(), "redis unavailable", attrRoute, r.Pattern, attrErr, err)
		h := w.Header()
		h.Del("RateLimit") // set only by a decision, and a 503 reports none
		h.Del("RateLimit-Policy")
		h.Set("Retry-After", strconv.Itoa(retryAfter))
		writeProblem(w, http.StatusServiceUnavailable, "the job store is unavailable or too slow; retry later")
	default:
		s.log.ErrorContext(r.Context(), "request failed", attrRoute, r.Pattern, attrErr, err)
		writeProblem(w, http.StatusInternalServerError, "internal error")
	}
}

// unavailable reports whether err means the job store could not be
// reached or did not answer in time: worth a retry, and never the client's
// fault.
func unavailable(err error) bool {
	return errors.Is(err, errRateUnavailable) || // any limiter error but ErrInvalid
		errors.Is(store.Classify(err), store.ErrUnavailable)
}
