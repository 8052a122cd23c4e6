package execution

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/leasehold/leasehold/fencing"
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
	keys    []string // concurrency keys, each holding a lease while this runs
	lane    string   // the keys as the job stores them: its lane (see internal/scripts/fair.lua)
	q       *queue
	trace   execTrace
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

// Emit appends an event (EventProgress, EventOutput or EventLog) with data
// marshalled as JSON to the job's event stream. It returns ErrNotOwner when
// the execution has lost its job: a stale writer's events are refused.
func (e *Execution) Emit(ctx context.Context, typ string, data any) error {
	switch typ {
	case EventProgress, EventOutput, EventLog:
	default:
		return fmt.Errorf("execution: unknown event type %q", typ)
	}
	b, err := json.Marshal(data)
	if err != nil {
		return fmt.Errorf("execution: event data: %w", err)
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
)

// outcome is how an execution ended, as the finish script records it.
type outcome struct {
	state     State // succeeded | failed | timed_out | cancelled | handed_off
	result    []byte
	err       *job.Error
	retryable bool
}
