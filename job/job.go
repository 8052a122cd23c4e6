package job

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/internal/store/scripts"
	"github.com/leasehold/leasehold/internal/telemetry"
)

// State is where a job is in its life.
type State string

// The states of a job. See the package documentation for the transitions.
const (
	StateQueued   State = "queued"
	StateRunning  State = "running"
	StateRetrying State = "retrying"
	// StateWaiting: its handler ended its execution to wait for a signal
	// (or its timeout); it holds no worker, lease or slot meanwhile.
	StateWaiting   State = "waiting"
	StateSucceeded State = "succeeded"
	StateFailed    State = "failed"
	StateCancelled State = "cancelled"
	StateExpired   State = "expired"
)

// Terminal reports whether s is final: a job in it changes again only if
// it is retried (Store.Retry) or deleted.
func (s State) Terminal() bool {
	switch s {
	case StateSucceeded, StateFailed, StateCancelled, StateExpired:
		return true
	}
	return false
}

func (s State) valid() bool {
	switch s {
	case StateQueued, StateRunning, StateRetrying, StateWaiting:
		return true
	}
	return s.Terminal()
}

// Code says why a job or an attempt ended badly.
type Code string

// The error codes of the API.
const (
	CodeHandlerError    Code = "handler_error"
	CodeTimeout         Code = "timeout"
	CodeLeaseLost       Code = "lease_lost"
	CodeMaxWaitExceeded Code = "max_wait_exceeded"
	CodeCancelled       Code = "cancelled"
	CodeUnknownKind     Code = "unknown_kind"
	// CodeUpstreamLimited: the upstream refused the job for capacity 50
	// times in a row (pushback), or, on a job still retrying, the last
	// pushback's reason.
	CodeUpstreamLimited Code = "upstream_limited"
	// CodeWaitTimeout: the job's last wait for a signal timed out, and the
	// job was resumed without it.
	CodeWaitTimeout Code = "wait_timeout"
)

// Error is the error a job ended with, or on a retried job the last
// attempt's error.
type Error struct {
	Code    Code   `json:"code"`
	Message string `json:"message"`
}

func (e *Error) Error() string { return string(e.Code) + ": " + e.Message }

// OnBusy says what a submission wants when its concurrency keys are full.
type OnBusy string

const (
	// OnBusyQueue waits in the queue for room (up to max_wait). The default.
	OnBusyQueue OnBusy = "queue"
	// OnBusyReject refuses the job at once when there is no room.
	OnBusyReject OnBusy = "reject"
)

// Execution is one attempt at running a job, by one worker, under one lease
// and one fencing token.
type Execution struct {
	ID           string        `json:"id"`
	Worker       string        `json:"worker"`
	FencingToken fencing.Token `json:"fencing_token"`
	Attempt      int           `json:"attempt"`
	StartedAt    time.Time     `json:"started_at"`
	HeartbeatAt  time.Time     `json:"heartbeat_at"`
	FinishedAt   *time.Time    `json:"finished_at"`
}

// Job is a job as the API shows it. Its JSON form is the API's job object;
// the fields tagged "-" are the options a worker needs, which the API does
// not show.
type Job struct {
	ID              string          `json:"id"`
	Tenant          string          `json:"tenant"`
	Queue           string          `json:"queue"`
	Kind            string          `json:"kind"`
	State           State           `json:"state"`
	Attempt         int             `json:"attempt"`
	MaxAttempts     int             `json:"max_attempts"`
	Priority        int             `json:"priority"`
	ConcurrencyKeys []string        `json:"concurrency_keys"`
	CreatedAt       time.Time       `json:"created_at"`
	StartedAt       *time.Time      `json:"started_at"`
	FinishedAt      *time.Time      `json:"finished_at"`
	CancelRequested bool            `json:"cancel_requested"`
	Execution       *Execution      `json:"execution"` // the latest; nil before the first
	Result          json.RawMessage `json:"result"`
	Error           *Error          `json:"error"`
	Metadata        json.RawMessage `json:"metadata"`
	// Input is the job's input. Store.List leaves it empty (a listing
	// does not show it: up to 1 MiB per job), and so the JSON leaves it out.
	Input    json.RawMessage `json:"input,omitempty"`
	Schedule *string         `json:"schedule"` // the schedule that fired it; nil otherwise
	// Cost is what the job is expected to spend of its keys' token budgets
	// (tpm): the submission's cost, or for llm.chat the estimate of its
	// prompt and max_tokens; nil for none.
	Cost *Cost `json:"cost"`
	// Webhook is where the job's ends are POSTed and how the delivery of
	// the last one stands; nil for none.
	Webhook *Webhook `json:"webhook"`
	// Checkpoint is the last checkpoint an execution saved; nil for none.
	// A state event (At) carries none: it may be 256 KiB, and changes
	// between moves.
	Checkpoint json.RawMessage `json:"checkpoint"`
	// WaitingFor is the signal a waiting job waits for, and until when;
	// nil in every other state.
	WaitingFor *WaitingFor `json:"waiting_for"`
	// BlockedBy says why a queued job does not run: no live worker of its
	// queue serves its kind. The store leaves it nil: the API computes it
	// where it shows one job (GET /v1/jobs/{id}), and the JSON leaves it
	// out when nil.
	BlockedBy *BlockedBy `json:"blocked_by,omitempty"`

	Timeout time.Duration `json:"-"` // per execution
	MaxWait time.Duration `json:"-"` // 0 = unlimited
	OnBusy  OnBusy        `json:"-"`
	// Trace is the span context of the job's submit span, the parent of
	// every span of the job; invalid when it was submitted untraced.
	Trace trace.SpanContext `json:"-"`

	// retries is the record's retries field: per retry, its state event's
	// id and the max_attempts before it (internal/store/scripts/job_retry.lua).
	// At reads it, so an event before a retry shows the max_attempts of then.
	retries string
}

// WebhookState is how the delivery of a job's end to its webhook stands.
type WebhookState string

// The states of a delivery. A job not ended yet shows WebhookPending with
// no attempts.
const (
	WebhookPending   WebhookState = "pending"
	WebhookDelivered WebhookState = "delivered" // a try got a 2xx answer
	WebhookFailed    WebhookState = "failed"    // no try did, for 24 h
)

// Webhook is a job's webhook and the delivery of its last end (package
// webhook delivers it).
type Webhook struct {
	URL      string       `json:"url"`
	State    WebhookState `json:"state"`
	Attempts int          `json:"attempts"`
	// Tries are the delivery's last tries, oldest first.
	Tries []WebhookTry `json:"tries"`
	// ID is the delivery's webhook-id, the same on each of its tries; ""
	// before the job's first end.
	ID string `json:"-"`
	// FirstTry is when the delivery was first tried; nil before it.
	FirstTry *time.Time `json:"-"`
}

// WebhookTry is one try of a delivery: the receiver's HTTP status, or
// why there was none.
type WebhookTry struct {
	At     time.Time `json:"at"`
	Status int       `json:"status,omitempty"`
	Error  string    `json:"error,omitempty"`
}

// MarshalJSON writes the try's time as the API writes times.
func (t WebhookTry) MarshalJSON() ([]byte, error) {
	type plain WebhookTry
	return json.Marshal(struct {
		plain
		At stamp `json:"at"`
	}{plain(t), stamp(t.At)})
}

// WaitingFor is what a waiting job waits for.
type WaitingFor struct {
	Name  string    `json:"name"`
	Until time.Time `json:"until"` // its timeout: the job resumes then without the signal
}

// MarshalJSON writes the API's waiting_for object.
func (w WaitingFor) MarshalJSON() ([]byte, error) {
	type plain WaitingFor
	return json.Marshal(struct {
		plain
		Until stamp `json:"until"`
	}{plain(w), stamp(w.Until)})
}

// BlockedBy is why a queued job does not run.
type BlockedBy struct {
	Kind   string `json:"kind"`
	Reason string `json:"reason"`
}

// WithOpaqueWorker is j with its execution's worker (a host name and pid)
// replaced by the name its tenant sees (OpaqueWorker).
func (j Job) WithOpaqueWorker(key []byte) Job {
	if j.Execution == nil || j.Execution.Worker == "" {
		return j
	}
	e := *j.Execution
	e.Worker = OpaqueWorker(key, j.Tenant, e.Worker)
	j.Execution = &e
	return j
}

// OpaqueWorker is the name tenant sees for worker: a keyed hash under
// key, which no tenant knows, stable for one worker and key, including
// the tenant so that two tenants cannot match their workers up.
func OpaqueWorker(key []byte, tenant, worker string) string {
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(tenant))
	mac.Write([]byte{0})
	mac.Write([]byte(worker))
	return "worker-" + hex.EncodeToString(mac.Sum(nil)[:6])
}

// stamp is a time as the API writes it: RFC 3339, milliseconds, UTC.
type stamp time.Time

func (s stamp) MarshalJSON() ([]byte, error) {
	return []byte(time.Time(s).UTC().Format(`"2006-01-02T15:04:05.000Z07:00"`)), nil
}

func stampOf(t *time.Time) *stamp { return (*stamp)(t) }

// MarshalJSON writes the API's job object. Decoding needs no counterpart:
// time.Time reads RFC 3339 with milliseconds as it is.
func (j Job) MarshalJSON() ([]byte, error) {
	type plain Job // no methods, so no recursion; the fields below shadow its times
	return json.Marshal(struct {
		plain
		CreatedAt  stamp  `json:"created_at"`
		StartedAt  *stamp `json:"started_at"`
		FinishedAt *stamp `json:"finished_at"`
	}{plain(j), stamp(j.CreatedAt), stampOf(j.StartedAt), stampOf(j.FinishedAt)})
}

// MarshalJSON writes the API's execution object.
func (e Execution) MarshalJSON() ([]byte, error) {
	type plain Execution
	return json.Marshal(struct {
		plain
		StartedAt   stamp  `json:"started_at"`
		HeartbeatAt stamp  `json:"heartbeat_at"`
		FinishedAt  *stamp `json:"finished_at"`
	}{plain(e), stamp(e.StartedAt), stamp(e.HeartbeatAt), stampOf(e.FinishedAt)})
}

// ParseRecord builds the Job id of queue from the fields of its Redis hash
// (HGETALL). The execution package reads the same hash, so this is the one
// place that knows how each field is encoded. (The fields, and who writes
// each: internal/store/scripts/transition.lua.) The hash's key names the job's
// id and queue, which a hash holds only when an older version wrote it.
func ParseRecord(queue, id string, h map[string]string) (Job, error) {
	if id == "" {
		return Job{}, fmt.Errorf("job: record has no id")
	}
	r := record{h: h}
	j := Job{
		ID:          id,
		Tenant:      h["tenant"],
		Queue:       queue,
		Kind:        h["kind"],
		State:       State(h["state"]),
		Attempt:     int(r.int("attempt")),
		MaxAttempts: int(r.int("max_attempts")),
		Priority:    int(r.int("priority")),
		CreatedAt:   r.time("created_at"),
		Result:      r.raw("result"),
		Checkpoint:  r.raw("checkpoint"),
		Metadata:    r.raw("metadata"),
		Input:       r.raw("input"),
		Timeout:     time.Duration(r.int("timeout_ms")) * time.Millisecond,
		MaxWait:     time.Duration(r.int("max_wait_ms")) * time.Millisecond,
		OnBusy:      OnBusy(r.get("on_busy")),
		Trace:       telemetry.Decode(h["trace"]),
		retries:     h["retries"],
	}
	if h["schedule"] != "" {
		name := h["schedule"]
		j.Schedule = &name
	}
	r.json("concurrency_keys", &j.ConcurrencyKeys)
	if h["cost"] != "" {
		j.Cost = &Cost{Tokens: r.int("cost")}
	}
	if h["webhook"] != "" {
		j.Webhook = r.webhook()
	}
	r.moved(&j)
	if j.State == StateWaiting {
		j.WaitingFor = &WaitingFor{Name: h["wait_for"], Until: r.time("wait_until")}
	}
	if r.err != nil {
		return Job{}, fmt.Errorf("job: record %s: %w", j.ID, r.err)
	}
	return j, nil
}

// webhook decodes the webhook fields (internal/store/scripts/transition.lua).
func (r *record) webhook() *Webhook {
	w := &Webhook{URL: r.h["webhook"], State: WebhookState(r.h["webhook_state"]), ID: r.h["webhook_id"],
		FirstTry: r.optTime("webhook_first_at"), Tries: []WebhookTry{}}
	if w.State == "" { // the job has not ended yet
		w.State = WebhookPending
		return w
	}
	w.Attempts = int(r.int("webhook_attempts"))
	r.json("webhook_tries", &w.Tries)
	return w
}

// moved decodes into j the fields that moves change and that a state event
// carries as they were (besides state and attempt): shown_names in
// internal/store/scripts/transition.lua.
func (r *record) moved(j *Job) {
	j.StartedAt = r.optTime("started_at")
	j.FinishedAt = r.optTime("finished_at")
	j.CancelRequested = r.h["cancel_requested"] == "1"
	j.Error = nil
	if r.h["error"] != "" {
		j.Error = &Error{}
		r.json("error", j.Error)
	}
	j.Execution = nil
	if r.h["exec_id"] != "" {
		j.Execution = &Execution{
			ID:           r.h["exec_id"],
			Worker:       r.h["exec_worker"],
			FencingToken: fencing.Token(r.int("token")),
			Attempt:      int(r.int("exec_attempt")),
			StartedAt:    r.time("exec_started_at"),
			HeartbeatAt:  r.time("exec_heartbeat_at"),
			FinishedAt:   r.optTime("exec_finished_at"),
		}
	}
}

// stateData is a state event's data as the stream stores it.
type stateData struct {
	State   State `json:"state"`
	Attempt int   `json:"attempt"`
	// Job holds the fields record.moved reads, as they were at the move,
	// in eventFields' order ("" for none); nil in events written before
	// state events carried them.
	Job []string `json:"job"`
	// Wait is what a move to waiting waits for: wait_for, wait_until,
	// then the checkpoint saved before it ("" for none; absent in events
	// written before waiting events carried it).
	Wait []string `json:"wait"`
}

// eventFields name the values of a state event's job array (an array
// concatenated in one expression: a table keyed by name, or cjson, cost a
// move as much as the rest of it).
var eventFields = scripts.EventFields

// At returns the job as it was at its state event e, given j, the job as
// it is now: e's state, attempt, max_attempts (which only a retry changes)
// and the fields moves change, with the fields that never change from j. result is j's for a succeeded job, and
// none at any other state: only the move to succeeded writes it, and
// nothing leaves succeeded. checkpoint is the one a waiting event holds
// (saved before the wait), and none at the other events. An event written
// before state events carried their fields shows j in the event's state
// and attempt.
func (j Job) At(e Event) (Job, error) {
	var d stateData
	var err error
	if e.Type != "state" {
		return Job{}, fmt.Errorf("job: event %s is a %s event, not a state event", e.ID, e.Type)
	}
	if err = json.Unmarshal(e.Data, &d); err != nil {
		return Job{}, fmt.Errorf("job: state event %s: %w", e.ID, err)
	}
	j.State, j.Attempt = d.State, d.Attempt
	j.Checkpoint, j.WaitingFor = nil, nil
	if len(d.Wait) >= 2 {
		ms, err := strconv.ParseInt(d.Wait[1], 10, 64)
		if err != nil {
			return Job{}, fmt.Errorf("job: state event %s: wait: %w", e.ID, err)
		}
		j.WaitingFor = &WaitingFor{Name: d.Wait[0], Until: time.UnixMilli(ms).UTC()}
	}
	if len(d.Wait) == 3 && d.Wait[2] != "" {
		j.Checkpoint = json.RawMessage(d.Wait[2])
	}
	if j.retries != "" {
		if j.MaxAttempts, err = maxAttemptsAt(j.MaxAttempts, j.retries, e.ID); err != nil {
			return Job{}, fmt.Errorf("job: state event %s: %w", e.ID, err)
		}
	}
	if d.Job == nil {
		return j, nil
	}
	if j.State != StateSucceeded {
		j.Result = nil
	}
	if len(d.Job) != len(eventFields) {
		return Job{}, fmt.Errorf("job: state event %s: %d fields, want %d", e.ID, len(d.Job), len(eventFields))
	}
	r := record{h: make(map[string]string, len(eventFields))}
	for k, name := range eventFields {
		r.h[name] = d.Job[k]
	}
	r.moved(&j)
	if r.err != nil {
		return Job{}, fmt.Errorf("job: state event %s: %w", e.ID, r.err)
	}
	return j, nil
}

// maxAttemptsAt is a job's max_attempts at its event id, given its
// max_attempts now and its record's retries: the max_attempts before the
// first retry after the event, or now's if none came after it.
func maxAttemptsAt(now int, retries, id string) (int, error) {
	at, err := ParseStreamID(id)
	if err != nil {
		return 0, err
	}
	for r := range strings.SplitSeq(retries, ",") {
		eid, before, _ := strings.Cut(r, ":")
		retry, err := ParseStreamID(eid)
		n, nerr := strconv.Atoi(before)
		if err != nil || nerr != nil {
			return 0, fmt.Errorf("field retries: bad entry %q", r)
		}
		if retry.After(at) {
			return n, nil
		}
	}
	return now, nil
}

// record decodes hash fields, keeping the first error so ParseRecord reads
// as a plain list of fields.
type record struct {
	h   map[string]string
	err error
}

// get returns field's value: a field the hash leaves out at its usual
// value (scripts.Implied) reads as that value.
func (r *record) get(field string) string {
	if v := r.h[field]; v != "" {
		return v
	}
	return scripts.Implied[field]
}

func (r *record) fail(field string, err error) {
	if r.err == nil {
		r.err = fmt.Errorf("field %s: %w", field, err)
	}
}

func (r *record) int(field string) int64 {
	n, err := strconv.ParseInt(r.get(field), 10, 64)
	if err != nil {
		r.fail(field, err)
	}
	return n
}

// time reads unix milliseconds.
func (r *record) time(field string) time.Time {
	return time.UnixMilli(r.int(field)).UTC()
}

// optTime reads unix milliseconds where "" means not yet.
func (r *record) optTime(field string) *time.Time {
	if r.h[field] == "" {
		return nil
	}
	t := r.time(field)
	return &t
}

// raw returns stored JSON as it is, nil (JSON null) for "".
func (r *record) raw(field string) json.RawMessage {
	if r.h[field] == "" {
		return nil
	}
	return json.RawMessage(r.h[field])
}

func (r *record) json(field string, v any) {
	if err := json.Unmarshal([]byte(r.h[field]), v); err != nil {
		r.fail(field, err)
	}
}
