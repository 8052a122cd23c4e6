package store

import (
	"github.com/leasehold/leasehold/job"

	"context"
	"encoding/json"
	"fmt"
	"time"

	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/leasehold/leasehold/internal/telemetry"
)

// Signal sends the signal name with data (JSON, at most MaxSignalData
// bytes) to job id of tenant (admin: of any tenant). A job waiting for
// that name is resumed at once (resumed is true: it is queued); any other
// job not ended keeps the signal for a later wait of that name, which takes
// it instead of waiting. A job that ended is returned with ErrConflict; one
// that keeps too many signals already with ErrSignalsFull.
func (s *Store) Signal(ctx context.Context, tenant, id string, admin bool, name string, data json.RawMessage) (j job.Job, resumed bool, err error) {
	if err := job.ValidateSignalName(name); err != nil {
		return job.Job{}, false, &job.ValidationError{Errors: []job.FieldError{{Field: "name", Message: "must match " + job.SignalNamePattern.String()}}}
	}
	if len(data) == 0 {
		data = json.RawMessage("null")
	}
	if len(data) > job.MaxSignalData || !json.Valid(data) {
		return job.Job{}, false, &job.ValidationError{Errors: []job.FieldError{{Field: "data", Message: fmt.Sprintf("must be JSON of at most %d bytes", job.MaxSignalData)}}}
	}
	queue, owner, lane, err := s.laneOf(ctx, tenant, id, admin)
	if err != nil {
		return job.Job{}, false, err
	}
	start := time.Now()
	res, err := s.run(ctx, jobSignalScript, signalCall{queue: queue, id: id, lane: lane, owner: owner, name: name, data: data}).Slice()
	if err != nil {
		return job.Job{}, false, fmt.Errorf("job: signal %s: %w", id, err)
	}
	r, err := decodeVerdict(res)
	if err != nil {
		return job.Job{}, false, fmt.Errorf("job: signal %s: %w", id, err)
	}
	if r.outcome == "missing" {
		return job.Job{}, false, job.ErrNotFound
	}
	if j, err = r.job(queue, id); err != nil {
		return job.Job{}, false, err
	}
	switch r.outcome {
	case "ended":
		return j, false, job.ErrConflict
	case "full":
		return j, false, job.ErrSignalsFull
	}
	s.traceSignal(ctx, j, name, r.outcome, start)
	return j, r.outcome == "resumed", nil
}

// traceSignal records a signal in j's trace, as a span from start to now
// linked to the caller's span. outcome is the signal script's: resumed or
// kept.
func (s *Store) traceSignal(ctx context.Context, j job.Job, name, outcome string, start time.Time) {
	if !j.Trace.IsValid() {
		return
	}
	parent := trace.ContextWithRemoteSpanContext(context.Background(), j.Trace)
	attrs := append(telemetry.Messaging(semconv.MessagingOperationName("signal"), j.Queue, j.ID), telemetry.Tenant.String(j.Tenant))
	_, span := s.jobs.tracer.Start(parent, "signal "+j.Queue, trace.WithTimestamp(start),
		trace.WithLinks(trace.LinkFromContext(ctx)), trace.WithAttributes(attrs...))
	span.AddEvent(job.EventSignal, trace.WithAttributes(telemetry.Outcome.String(outcome),
		telemetry.State.String(string(j.State)), telemetry.Signal.String(name)))
	span.End()
}
