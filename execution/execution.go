package execution

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/internal/store"
	"github.com/leasehold/leasehold/job"
)

// ErrShutdown is the cause of an execution's context when its worker shuts
// down gracefully and the grace period has run out: the job is handed back
// to its queue without spending the attempt.
var ErrShutdown = errors.New("execution: worker shutting down")

// ErrNotOwner means a write was refused because the execution no longer
// owns its job: its token is stale or the job is not running any more.
var ErrNotOwner = fmt.Errorf("execution: not the owner: %w", fencing.ErrStale)

// Handler runs one execution of a job of the kind it was registered for.
// Its result is stored as the job's result, as JSON. It must return soon
// after ctx is done; context.Cause(ctx) says why: cancel.ErrRequested,
// lease.ErrLost, ErrShutdown or context.DeadlineExceeded (the timeout).
type Handler func(ctx context.Context, e *Execution) (result any, err error)

// Execution is one attempt at running a job, owned through one lease and
// one fencing token.
type Execution struct {
	ID      string
	JobID   string
	Queue   string
	Kind    string
	Input   json.RawMessage
	Timeout time.Duration
	Tenant  string // who submitted the job

	attempt int
	token   fencing.Token
	keys    []string  // concurrency keys, each holding a lease while this runs
	lane    string    // the lane it was claimed from (see internal/store/scripts/fair.lua)
	granted time.Time // when its leases were asked for: they were granted after, so its trust window counts from it
	q       *queue
	trace   execTrace
	emitted atomic.Int64 // events emitted so far, against Config.MaxEvents
	cost    int64        // the tokens it reserved of its keys' tpm budgets
	waited  budgetWait   // its job's wait for a key's budget before this claim, if this worker saw one
	spent   atomic.Int64 // the tokens it reported (ReportTokens), plus 1; 0: none reported
	resume  Resume       // what the claim handed out
}

// Resume is what an execution starts from: the job's last checkpoint, and
// the signal that resumed it from its last wait.
type Resume struct {
	// Checkpoint is the last checkpoint any execution of the job saved
	// (Execution.Checkpoint), as of this one's claim; nil for none.
	Checkpoint json.RawMessage
	// Signal is what ended the job's last wait: a signal, or its timeout
	// (Signal.TimedOut); nil when it never waited. It stays the same for
	// every execution until the job waits again.
	Signal *job.Signal
}

// Resume returns what this execution starts from: the checkpoint and the
// signal as they were when it was claimed.
func (e *Execution) Resume() Resume { return e.resume }

// ErrCheckpointTooLarge is wrapped by the error of a Checkpoint larger
// than job.MaxCheckpoint bytes as JSON.
var ErrCheckpointTooLarge = errors.New("execution: checkpoint too large")

// Checkpoint saves v, marshalled as JSON (at most job.MaxCheckpoint
// bytes), as the job's checkpoint: every later execution of the job starts
// from it (Resume), after a wait, a crash, a retry or a hand-off. It is
// written only while this execution owns the job and its lease lasts:
// otherwise it returns ErrNotOwner and changes nothing, so a stale worker
// can never overwrite a newer execution's checkpoint.
func (e *Execution) Checkpoint(ctx context.Context, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("execution: checkpoint: %w", err)
	}
	if len(b) > job.MaxCheckpoint {
		return Permanent(fmt.Errorf("%w: %d bytes, at most %d", ErrCheckpointTooLarge, len(b), job.MaxCheckpoint))
	}
	return e.q.checkpoint(ctx, e, b)
}

// ReportTokens reports the tokens this execution actually spent (an LLM
// call's usage): when it ends, they replace its estimate in its keys' tpm
// budgets. The last report counts; it is taken as from 0 to
// job.MaxBudget, the largest tpm.
func (e *Execution) ReportTokens(n int64) {
	e.spent.Store(min(max(n, 0), job.MaxBudget) + 1)
}

// tokens is what the execution reported it spent, -1 when it reported
// nothing (its estimate stands).
func (e *Execution) tokens() int64 { return e.spent.Load() - 1 }

// owner is e as the store's fenced writes name it.
func (e *Execution) owner() store.RunningExecution {
	return store.RunningExecution{JobID: e.JobID, ID: e.ID, Token: e.token, Keys: e.keys}
}

// Token is the execution's fencing token: pass it to every downstream write
// (fencing.SetHeader) so a store can refuse this execution once a newer one
// owns the job.
func (e *Execution) Token() fencing.Token { return e.token }

// ConcurrencyKeys are the keys whose leases this execution holds.
func (e *Execution) ConcurrencyKeys() []string { return slices.Clone(e.keys) }

// Attempt counts from 1; a hand-off at shutdown does not spend one.
func (e *Execution) Attempt() int { return e.attempt }

// Event types a handler may emit.
const (
	EventProgress = "progress"
	EventOutput   = "output"
	EventLog      = "log"
)

// ErrTooManyEvents is wrapped by the error of an Emit past the worker's
// Config.MaxEvents, ErrEventTooLarge by that of an Emit whose data is over
// MaxEventBytes. Those errors are permanent (see Permanent): a handler
// that returns one fails its job without a retry, which would only flood
// again.
var (
	ErrTooManyEvents = errors.New("execution: too many events")
	ErrEventTooLarge = errors.New("execution: event too large")
)

// MaxEventBytes bounds one event's data, as JSON: every event is kept in
// the job's stream (up to about scripts.EventsMaxLen of them) and sent to
// every reader of it, so with the count it bounds a job's stream.
const MaxEventBytes = 64 << 10

// MaxErrorMessage bounds the message of a job's error that a handler's
// error becomes, in bytes: the error is kept with the job and copied into
// each later state event, and a handler's text (a remote handler's NDJSON
// error, a panic's stack) can be any size. A longer message is cut at a
// character boundary, with "…" and how much was cut.
const MaxErrorMessage = 2048

// Emit appends an event (EventProgress, EventOutput or EventLog) with data
// marshalled as JSON to the job's event stream. It returns ErrNotOwner when
// the execution has lost its job: a stale writer's events are refused. Past
// the worker's Config.MaxEvents events, or with data over MaxEventBytes, it
// writes nothing and returns an error wrapping ErrTooManyEvents or
// ErrEventTooLarge.
func (e *Execution) Emit(ctx context.Context, typ string, data any) error {
	switch typ {
	case EventProgress, EventOutput, EventLog:
	default:
		return fmt.Errorf("execution: unknown event type %q", typ)
	}
	if n := e.emitted.Add(1); n > int64(e.q.maxEvents) {
		return Permanent(fmt.Errorf("%w: an execution may emit %d events", ErrTooManyEvents, e.q.maxEvents))
	}
	b, err := json.Marshal(data)
	if err != nil {
		return fmt.Errorf("execution: event data: %w", err)
	}
	if len(b) > MaxEventBytes {
		return Permanent(fmt.Errorf("%w: %d bytes of data, at most %d", ErrEventTooLarge, len(b), MaxEventBytes))
	}
	return e.q.emit(ctx, e, typ, b)
}

// PermanentError marks a handler error that retrying cannot fix: the job
// fails at once, whatever attempts remain.
type PermanentError struct{ Err error }

func (e *PermanentError) Error() string { return e.Err.Error() }
func (e *PermanentError) Unwrap() error { return e.Err }

// Permanent wraps err so the job is not retried.
func Permanent(err error) error { return &PermanentError{Err: err} }

// State is where an execution is in its life: running, then one of the
// others, once. A job's state (job.State) is another thing: a job whose
// execution failed may be retrying.
type State string

// The states of an execution.
const (
	StateRunning   State = "running"
	StateSucceeded State = "succeeded"
	StateFailed    State = "failed"
	StateTimedOut  State = "timed_out"
	StateCancelled State = "cancelled"
	// StateLost: its lease expired; the reaper retried or finalised the job.
	StateLost State = "lost"
	// StateHandedOff: its worker shut down gracefully; the job is ready
	// again without spending the attempt.
	StateHandedOff State = "handed_off"
	// StatePushback: the upstream refused it for capacity; the job waits
	// to run again without spending the attempt (PushbackError).
	StatePushback State = "pushback"
	// StateWaiting: its handler asked to wait for a signal (Wait); the job
	// waits, holding nothing, without spending the attempt.
	StateWaiting State = "waiting"
)

// DefaultWaitTimeout is the timeout of a Wait that names none.
const DefaultWaitTimeout = time.Hour

// WaitError is what a handler returns to end its execution and wait for
// the signal For (see Wait).
type WaitError struct {
	For     string
	Timeout time.Duration
}

func (e *WaitError) Error() string {
	return fmt.Sprintf("execution: wait for signal %q (timeout %v)", e.For, e.Timeout)
}

// Wait returns the error a handler returns to wait for the signal name:
//
//	if e.Resume().Signal == nil {
//		_ = e.Checkpoint(ctx, state) // what the next execution starts from
//		return nil, execution.Wait("approval", 24*time.Hour)
//	}
//
// The execution ends, and its job becomes waiting: it holds no worker,
// lease or concurrency slot, and spends no attempt. A signal of that name
// (POST /v1/jobs/{id}/signal, Client.Signal) queues it again, at once; one
// sent before the wait is taken by it. After timeout (≤ 0:
// DefaultWaitTimeout; at most the worker's Retention) it is queued anyway,
// told that the wait timed out.
// The next execution reads the signal and the checkpoint with Resume. A
// name that is not a valid signal name (job.ValidateSignalName) fails the
// job.
func Wait(name string, timeout time.Duration) error {
	if timeout <= 0 {
		timeout = DefaultWaitTimeout
	}
	return &WaitError{For: name, Timeout: timeout}
}

// RetryAfterError marks a handler error, to be retried like any other, whose
// cause asked for the next attempt to wait at least After: an upstream's
// Retry-After. The wait is the longer of After and the worker's backoff.
type RetryAfterError struct {
	Err   error
	After time.Duration
}

func (e *RetryAfterError) Error() string { return e.Err.Error() }
func (e *RetryAfterError) Unwrap() error { return e.Err }

// PushbackError marks a handler error as pushback: the upstream refused the
// call for capacity (an HTTP 429, or a 503 with Retry-After). The job goes
// back to its queue without spending an attempt, to run no sooner than
// RetryAfter (0: a backoff that grows with each pushback in a row), and
// the adaptive keys the refusal concerns lower their effective limit and
// hold their claims for RetryAfter. The 50th pushback in a row fails the
// job (upstream_limited).
type PushbackError struct {
	Err        error
	RetryAfter time.Duration
	// Keys are the keys the refusal concerns, such as the model's key of
	// the upstream that refused; nil: every key of the job. Only the
	// job's own adaptive keys among them are cut: a job that names a
	// second model's key does not throttle that model for everyone when
	// its own model refuses.
	Keys []string
}

func (e *PushbackError) Error() string { return e.Err.Error() }
func (e *PushbackError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrPushback) true.
func (e *PushbackError) Is(target error) bool { return target == ErrPushback }

// ErrPushback is what errors.Is finds in a *PushbackError.
var ErrPushback = errors.New("execution: pushback from the upstream")

// Pushback wraps err, the upstream's refusal for capacity, as pushback
// that concerns every key of the job.
func Pushback(err error, retryAfter time.Duration) error {
	return &PushbackError{Err: err, RetryAfter: max(retryAfter, 0)}
}

// PushbackOn is Pushback concerning only keys (of those the job names;
// none when empty): the upstream that refused is guarded by them alone.
func PushbackOn(keys []string, err error, retryAfter time.Duration) error {
	return &PushbackError{Err: err, RetryAfter: max(retryAfter, 0), Keys: append([]string{}, keys...)}
}

// pushedBackOn says whether o is a pushback that concerns key.
func (o outcome) pushedBackOn(key string) bool {
	return o.state == StatePushback && (o.pushedBack == nil || slices.Contains(o.pushedBack, key))
}

// RetryAfter wraps err so the job's next attempt starts no sooner than d
// from the end of this one.
func RetryAfter(err error, d time.Duration) error { return &RetryAfterError{Err: err, After: d} }

// outcome is how an execution ended, as the finish script records it.
type outcome struct {
	state     State // succeeded | failed | timed_out | cancelled | handed_off | pushback | waiting
	result    []byte
	err       *job.Error
	retryable bool
	// minBackoff is the least wait before a retry (RetryAfterError); the
	// worker's backoff wins when longer. For a pushback, the upstream's
	// Retry-After alone.
	minBackoff time.Duration
	// unrun: the handler never ran (a claim too slow to trust, a context
	// ended before the start), so it spent nothing of its keys' budgets.
	unrun bool
	// wait is what a waiting execution waits for (StateWaiting only).
	wait *WaitError
	// pushedBack are the keys a pushback concerns (PushbackError.Keys);
	// nil: all of the execution's keys.
	pushedBack []string
}
