package store

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/internal/store/scripts"
	"github.com/leasehold/leasehold/internal/telemetry"
	"github.com/leasehold/leasehold/job"
)

// ParseRecord builds the Job id of queue from the fields of its Redis hash
// (HGETALL). The execution package reads the same hash, so this is the one
// place that knows how each field is encoded. (The fields, and who writes
// each: internal/store/scripts/transition.lua.) The hash's key names the job's
// id and queue, which a hash holds only when an older version wrote it.
func ParseRecord(queue, id string, h map[string]string) (job.Job, error) {
	if id == "" {
		return job.Job{}, fmt.Errorf("job: record has no id")
	}
	r := record{h: h}
	j := job.Job{
		ID:          id,
		Tenant:      h["tenant"],
		Queue:       queue,
		Kind:        h["kind"],
		State:       job.State(h["state"]),
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
		OnBusy:      job.OnBusy(r.get("on_busy")),
		Trace:       telemetry.Decode(h["trace"]),
		Retries:     h["retries"],
	}
	if h["schedule"] != "" {
		name := h["schedule"]
		j.Schedule = &name
	}
	r.json("concurrency_keys", &j.ConcurrencyKeys)
	if h["cost"] != "" {
		j.Cost = &job.Cost{Tokens: r.int("cost")}
	}
	if h["webhook"] != "" {
		j.Webhook = r.webhook()
	}
	r.moved(&j)
	if j.State == job.StateWaiting {
		j.WaitingFor = &job.WaitingFor{Name: h["wait_for"], Until: r.time("wait_until")}
	}
	if r.err != nil {
		return job.Job{}, fmt.Errorf("job: record %s: %w", j.ID, r.err)
	}
	return j, nil
}

// webhook decodes the webhook fields (internal/store/scripts/transition.lua).
func (r *record) webhook() *job.Webhook {
	w := &job.Webhook{URL: r.h["webhook"], State: job.WebhookState(r.h["webhook_state"]), ID: r.h["webhook_id"],
		FirstTry: r.optTime("webhook_first_at"), Tries: []job.WebhookTry{}}
	if w.State == "" { // the job has not ended yet
		w.State = job.WebhookPending
		return w
	}
	w.Attempts = int(r.int("webhook_attempts"))
	r.json("webhook_tries", &w.Tries)
	return w
}

// moved decodes into j the fields that moves change and that a state event
// carries as they were (besides state and attempt): shown_names in
// internal/store/scripts/transition.lua.
func (r *record) moved(j *job.Job) {
	j.StartedAt = r.optTime("started_at")
	j.FinishedAt = r.optTime("finished_at")
	j.CancelRequested = r.h["cancel_requested"] == "1"
	j.Error = nil
	if r.h["error"] != "" {
		j.Error = &job.Error{}
		r.json("error", j.Error)
	}
	j.Execution = nil
	if r.h["exec_id"] != "" {
		j.Execution = &job.Execution{
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
	State   job.State `json:"state"`
	Attempt int       `json:"attempt"`
	// Job holds the fields record.moved reads, as they were at the move,
	// in scripts.EventFields' order ("" for none); nil in events written before
	// state events carried them.
	Job []string `json:"job"`
	// Wait is what a move to waiting waits for: wait_for, wait_until,
	// then the checkpoint saved before it ("" for none; absent in events
	// written before waiting events carried it).
	Wait []string `json:"wait"`
}

// JobAt returns the job as it was at its state event e, given j, the job as
// it is now: e's state, attempt, max_attempts (which only a retry changes)
// and the fields moves change, with the fields that never change from j. result is j's for a succeeded job, and
// none at any other state: only the move to succeeded writes it, and
// nothing leaves succeeded. checkpoint is the one a waiting event holds
// (saved before the wait), and none at the other events. An event written
// before state events carried their fields shows j in the event's state
// and attempt.
func JobAt(j job.Job, e job.Event) (job.Job, error) {
	var d stateData
	var err error
	if e.Type != "state" {
		return job.Job{}, fmt.Errorf("job: event %s is a %s event, not a state event", e.ID, e.Type)
	}
	if err = json.Unmarshal(e.Data, &d); err != nil {
		return job.Job{}, fmt.Errorf("job: state event %s: %w", e.ID, err)
	}
	j.State, j.Attempt = d.State, d.Attempt
	j.Checkpoint, j.WaitingFor = nil, nil
	if len(d.Wait) >= 2 {
		ms, err := strconv.ParseInt(d.Wait[1], 10, 64)
		if err != nil {
			return job.Job{}, fmt.Errorf("job: state event %s: wait: %w", e.ID, err)
		}
		j.WaitingFor = &job.WaitingFor{Name: d.Wait[0], Until: time.UnixMilli(ms).UTC()}
	}
	if len(d.Wait) == 3 && d.Wait[2] != "" {
		j.Checkpoint = json.RawMessage(d.Wait[2])
	}
	if j.Retries != "" {
		if j.MaxAttempts, err = maxAttemptsAt(j.MaxAttempts, j.Retries, e.ID); err != nil {
			return job.Job{}, fmt.Errorf("job: state event %s: %w", e.ID, err)
		}
	}
	if d.Job == nil {
		return j, nil
	}
	if j.State != job.StateSucceeded {
		j.Result = nil
	}
	if len(d.Job) != len(scripts.EventFields) {
		return job.Job{}, fmt.Errorf("job: state event %s: %d fields, want %d", e.ID, len(d.Job), len(scripts.EventFields))
	}
	r := record{h: make(map[string]string, len(scripts.EventFields))}
	for k, name := range scripts.EventFields {
		r.h[name] = d.Job[k]
	}
	r.moved(&j)
	if r.err != nil {
		return job.Job{}, fmt.Errorf("job: state event %s: %w", e.ID, r.err)
	}
	return j, nil
}

// maxAttemptsAt is a job's max_attempts at its event id, given its
// max_attempts now and its record's retries: the max_attempts before the
// first retry after the event, or now's if none came after it.
func maxAttemptsAt(now int, retries, id string) (int, error) {
	at, err := job.ParseStreamID(id)
	if err != nil {
		return 0, err
	}
	for r := range strings.SplitSeq(retries, ",") {
		eid, before, _ := strings.Cut(r, ":")
		retry, err := job.ParseStreamID(eid)
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
