package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/leasehold/leasehold/internal/parallel"
	"github.com/leasehold/leasehold/job"
)

// batchItemTime is how much longer than RedisTimeout a batch may take for
// each of its items: a batch is a few round trips, but the Redis work of
// each of its jobs.
const batchItemTime = 5 * time.Millisecond

// batchEntry is one item's answer in a batch: 201 or 200 with its job (as
// job.Job's MarshalJSON writes it), or a 4xx with the problem its own POST
// /v1/jobs would have answered.
type batchEntry struct {
	Status  int             `json:"status"`
	Job     json.RawMessage `json:"job,omitempty"`
	Problem json.RawMessage `json:"problem,omitempty"`
}

// jobEntry is the entry of an item that got job j: created, or an
// idempotent replay.
func jobEntry(j job.Job, created bool) batchEntry {
	e := batchEntry{Status: http.StatusOK}
	if created {
		e.Status = http.StatusCreated
	}
	var err error
	if e.Job, err = j.MarshalJSON(); err != nil {
		panic(err) // as marshal does: a Job always encodes
	}
	return e
}

// batchAnswer is marshal(batchBody[batchEntry]{Jobs: entries}), byte for
// byte, without encoding/json's second pass over each job's JSON (it
// compacts a RawMessage), which was half the encoding.
// TestBatchAnswerIsJSONMarshals holds the two to the same bytes.
func batchAnswer(entries []batchEntry) []byte {
	b := append(make([]byte, 0, 512*len(entries)), `{"jobs":[`...)
	for i, e := range entries {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(append(b, `{"status":`...), int64(e.Status), 10)
		if len(e.Job) > 0 {
			b = append(append(b, `,"job":`...), e.Job...)
		}
		if len(e.Problem) > 0 {
			b = append(append(b, `,"problem":`...), e.Problem...)
		}
		b = append(b, '}')
	}
	return append(b, "]}"...)
}

// batchBody is the body of POST /v1/jobs/batch, in and out.
type batchBody[T any] struct {
	Jobs []T `json:"jobs"`
}

// POST /v1/jobs/batch: each item is submitted as its own POST /v1/jobs
// would be, in a few round trips for the whole batch (store.Store.SubmitBatch).
//
// The body is read only in one of the process's batch slots (slots),
// and split into its items with a scan that decodes none of them. The
// rate is spent from that count, before any item is decoded: an item past
// the rate is answered 429 undecoded, so a tenant over its rate costs the
// process its body and one scan, not its items' decoding.
func (s *server) submitBatch(w http.ResponseWriter, r *http.Request, c caller) {
	if err := s.batches.take(c.tenant); err != nil {
		s.fail(w, r, err)
		return
	}
	defer s.batches.give(c.tenant)
	body, err := readJSONBody(w, r, s.maxBatchBody)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	raws, err := decodeBatch(body)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	ctx, stop := s.redisContext(r.Context(), time.Duration(len(raws))*batchItemTime)
	defer stop()
	admitted, err := s.admit(ctx, w, c.tenant, idempotencyKeys(raws))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	entries := make([]batchEntry, len(raws))
	var spent []json.RawMessage // the items the rate admitted
	var spentAt []int           // the index of each in the batch
	for i, raw := range raws {
		if admitted[i] {
			spent, spentAt = append(spent, raw), append(spentAt, i)
		} else if entries[i], err = s.itemProblem(r, errRateLimited); err != nil {
			s.fail(w, r, err)
			return
		}
	}
	items := make([]job.BatchItem, 0, len(spent))
	at := make([]int, 0, len(spent)) // the index of each of items in the batch
	decoded, errs := s.decodeItems(c.tenant, spent)
	for k, err := range errs {
		if err == nil {
			items, at = append(items, decoded[k]), append(at, spentAt[k])
			continue
		}
		if entries[spentAt[k]], err = s.itemProblem(r, err); err != nil {
			s.fail(w, r, err)
			return
		}
	}
	var results []job.BatchResult
	if len(items) > 0 {
		// Each job is encoded as soon as it is answered, while Redis
		// creates the ones after it.
		results, err = s.store.SubmitBatchEach(ctx, c.tenant, items, s.capOf(), func(k int, res job.BatchResult) {
			entries[at[k]] = jobEntry(s.shown(c, res.Job), res.Created)
		})
		if results == nil { // nothing was created
			s.fail(w, r, err)
			return
		}
	}
	var woken []string // the queues of the jobs created
	lost := map[*job.UnansweredError]batchEntry{}
	for k, res := range results {
		var unanswered *job.UnansweredError
		switch {
		case errors.As(res.Err, &unanswered):
			// One problem, and one log line, per failure, not per item.
			e, ok := lost[unanswered]
			if !ok {
				e = s.failedItem(w, r, unanswered.Err)
				lost[unanswered] = e
			}
			entries[at[k]] = e
		case res.Err != nil:
			s.countRejection(ctx, res.Err)
			if entries[at[k]], err = s.itemProblem(r, res.Err); err != nil {
				s.fail(w, r, err)
				return
			}
		case res.Created && !slices.Contains(woken, res.Job.Queue):
			woken = append(woken, res.Job.Queue)
			s.wake(r, res.Job.Queue)
		}
	}
	body = batchAnswer(entries)
	writeBody(w, http.StatusOK, "application/json", body)
}

// failedItem is the entry of an item that a failure (err) left unanswered:
// the 5xx its own POST /v1/jobs would get. Its Retry-After becomes the
// batch's, unless the rate's is longer.
func (s *server) failedItem(w http.ResponseWriter, r *http.Request, err error) batchEntry {
	rec := &recorded{header: http.Header{}}
	s.fail(rec, r, err)
	wait, _ := strconv.Atoi(rec.header.Get("Retry-After"))
	if set, _ := strconv.Atoi(w.Header().Get("Retry-After")); wait > set {
		w.Header().Set("Retry-After", strconv.Itoa(wait))
	}
	return batchEntry{Status: rec.status, Problem: bytes.TrimSpace(rec.body.Bytes())}
}

// idempotencyKeys returns the "idempotency_key" of each of raws as far as
// a scan of its members reads it, "" for none or one that is not a
// string: enough for the rate to tell a replay (which spends nothing)
// before the item is decoded, which checks the key.
func idempotencyKeys(raws []json.RawMessage) []string {
	keys := make([]string, len(raws))
	for i, raw := range raws {
		if raw[0] != '{' {
			continue
		}
		if k, ok := objectMembers(raw)["idempotency_key"]; ok && k[0] == '"' {
			_ = json.Unmarshal(k, &keys[i]) // a valid JSON string
		}
	}
	return keys
}

// decodeItems decodes each of raws with decodeItem, on every CPU at once
// (parallel.Each).
func (s *server) decodeItems(tenant string, raws []json.RawMessage) ([]job.BatchItem, []error) {
	items, errs := make([]job.BatchItem, len(raws)), make([]error, len(raws))
	parallel.Each(len(raws), func(i int) { items[i], errs[i] = s.decodeItem(tenant, raws[i]) })
	return items, errs
}

// decodeBatch reads {"jobs": [...]}: one object whose one member is an
// array of 1 to job.MaxBatch items, each left for decodeItem.
func decodeBatch(body []byte) ([]json.RawMessage, error) {
	raw, err := decodeObject(body)
	if err != nil {
		return nil, err
	}
	var fields []job.FieldError
	for name := range raw {
		if name != "jobs" {
			fields = append(fields, job.FieldError{Field: name, Message: "unknown field"})
		}
	}
	if len(fields) > 0 {
		return nil, &badRequest{detail: "a batch is {\"jobs\": [...]}: see errors", fields: fields}
	}
	jobs, ok := raw["jobs"]
	if !ok || jobs[0] != '[' {
		return nil, fieldError("jobs", "is required: an array of submissions")
	}
	items := arrayElements(jobs)
	if len(items) < 1 || len(items) > job.MaxBatch {
		return nil, fieldError("jobs", fmt.Sprintf("must hold 1 to %d submissions, not %d", job.MaxBatch, len(items)))
	}
	return items, nil
}

// decodeItem reads and checks one item of a batch as submitJob reads its
// body, with the idempotency key that its header would carry in its
// "idempotency_key" member.
func (s *server) decodeItem(tenant string, raw json.RawMessage) (job.BatchItem, error) {
	var it job.BatchItem
	if int64(len(raw)) > s.maxBody {
		return it, &http.MaxBytesError{Limit: s.maxBody}
	}
	members, err := validObject(raw)
	if err != nil {
		return it, err
	}
	if k, ok := members["idempotency_key"]; ok {
		delete(members, "idempotency_key")
		if json.Unmarshal(k, &it.IdempotencyKey) != nil || !printableASCII(it.IdempotencyKey, 255) {
			return it, fieldError("idempotency_key", "must be a string of 1 to 255 printable ASCII characters")
		}
	}
	given, err := decodeMembers(members, &it.Submission)
	if err == nil {
		err = it.Submission.ValidateGiven(given)
	}
	if err == nil {
		err = s.checkQueue(it.Submission)
	}
	if err == nil {
		err = s.checkInput(tenant, it.Submission)
	}
	return it, err
}

// itemProblem is the entry of an item refused with err: the problem that
// fail answers for it, which must be the client's fault (4xx); any other
// is returned, for the whole batch to fail with.
func (s *server) itemProblem(r *http.Request, err error) (batchEntry, error) {
	rec := &recorded{header: http.Header{}}
	s.fail(rec, r, err)
	if rec.status < 400 || rec.status >= 500 {
		return batchEntry{}, err
	}
	return batchEntry{Status: rec.status, Problem: bytes.TrimSpace(rec.body.Bytes())}, nil
}

// recorded is a ResponseWriter that keeps what fail wrote, so that an
// item's problem is the one its own request would get.
type recorded struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (w *recorded) Header() http.Header         { return w.header }
func (w *recorded) Write(b []byte) (int, error) { return w.body.Write(b) }
func (w *recorded) WriteHeader(status int)      { w.status = status }
