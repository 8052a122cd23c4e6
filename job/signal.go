package job

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"time"

	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/leasehold/leasehold/internal/telemetry"
)

// Bounds of signals (API.md, Waits, signals and checkpoints).
const (
	// MaxSignalData is the most bytes of a signal's data.
	MaxSignalData = 64 << 10
	// MaxCheckpoint is the most bytes of a checkpoint.
	MaxCheckpoint = 256 << 10
	// MaxKeptSignals is how many signals a job keeps for later waits (sent
	// before a wait for them, or for another name), and MaxKeptSignalBytes
	// how many bytes of data they hold in all: a signal past either → ErrSignalsFull.
	MaxKeptSignals     = 16
	MaxKeptSignalBytes = 256 << 10
)

// ErrSignalsFull: the job already keeps MaxKeptSignals signals, or
// MaxKeptSignalBytes of their data, for waits to come; the signal was not
// kept.
var ErrSignalsFull = errors.New("job: too many signals kept for later waits")

var signalName = regexp.MustCompile(`^[a-z0-9][a-z0-9_.:-]{0,63}$`)

// ValidateSignalName checks the name of a signal, or of the signal a wait
// waits for.
func ValidateSignalName(name string) error {
	if !signalName.MatchString(name) {
		return fmt.Errorf("job: signal name %q must match %s", name, signalName)
	}
	return nil
}

// Signal is what resumed a job from a wait: the signal's name and data, or
// TimedOut when its wait reached its timeout first (Data is then null).
type Signal struct {
	Name     string          `json:"name"`
	Data     json.RawMessage `json:"data"`
	TimedOut bool            `json:"timed_out"`
}

// Span event name of a signal in the job's trace.
const EventSignal = "signal"

// Signal sends the signal name with data (JSON, at most MaxSignalData
// bytes) to job id of tenant (admin: of any tenant). A job waiting for
// that name is resumed at once (resumed is true: it is queued); any other
// job not ended keeps the signal for a later wait of that name, which takes
// it instead of waiting. A job that ended is returned with ErrConflict; one
// that keeps too many signals already with ErrSignalsFull.
func (s *Store) Signal(ctx context.Context, tenant, id string, admin bool, name string, data json.RawMessage) (j Job, resumed bool, err error) {
	if err := ValidateSignalName(name); err != nil {
		return Job{}, false, &ValidationError{Errors: []FieldError{{Field: "name", Message: "must match " + signalName.String()}}}
	}
	if len(data) == 0 {
		data = json.RawMessage("null")
	}
	if len(data) > MaxSignalData || !json.Valid(data) {
		return Job{}, false, &ValidationError{Errors: []FieldError{{Field: "data", Message: fmt.Sprintf("must be JSON of at most %d bytes", MaxSignalData)}}}
	}
	queue, owner, lane, err := s.laneOf(ctx, tenant, id, admin)
	if err != nil {
		return Job{}, false, err
	}
	start := time.Now()
	res, err := s.run(ctx, s.signal, signalCall{queue: queue, id: id, lane: lane, owner: owner, name: name, data: data}).Slice()
	if err != nil {
		return Job{}, false, fmt.Errorf("job: signal %s: %w", id, err)
	}
	r, err := decodeVerdict(res)
	if err != nil {
		return Job{}, false, fmt.Errorf("job: signal %s: %w", id, err)
	}
	if r.outcome == "missing" {
		return Job{}, false, ErrNotFound
	}
	if j, err = r.job(queue, id); err != nil {
		return Job{}, false, err
	}
	switch r.outcome {
	case "ended":
		return j, false, ErrConflict
	case "full":
		return j, false, ErrSignalsFull
	}
	s.traceSignal(ctx, j, name, r.outcome, start)
	return j, r.outcome == "resumed", nil
}

// traceSignal records a signal in j's trace, as a span from start to now
// linked to the caller's span. outcome is the signal script's: resumed or
// kept.
func (s *Store) traceSignal(ctx context.Context, j Job, name, outcome string, start time.Time) {
	if !j.Trace.IsValid() {
		return
	}
	parent := trace.ContextWithRemoteSpanContext(context.Background(), j.Trace)
	attrs := append(telemetry.Messaging(semconv.MessagingOperationName("signal"), j.Queue, j.ID), telemetry.Tenant.String(j.Tenant))
	_, span := s.tracer.Start(parent, "signal "+j.Queue, trace.WithTimestamp(start),
		trace.WithLinks(trace.LinkFromContext(ctx)), trace.WithAttributes(attrs...))
	span.AddEvent(EventSignal, trace.WithAttributes(telemetry.Outcome.String(outcome),
		telemetry.State.String(string(j.State)), telemetry.Signal.String(name)))
	span.End()
}
