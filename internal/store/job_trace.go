package store

import (
	"github.com/leasehold/leasehold/job"

	"context"
	"time"

	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/leasehold/leasehold/internal/telemetry"
)

// producer is the kind of a submit's span, made once.
var producer = trace.WithSpanKind(trace.SpanKindProducer)

// startSubmit starts the span that is the parent of everything that happens
// to job id: the submit script stores its context with the job. Its
// attributes are made only for a span that records them: a batch starts a
// thousand, and with tracing off (or the trace not sampled) making them
// cost about a millisecond of a batch's Go work before its first script.
func (s *Store) startSubmit(ctx context.Context, tenant, queue, id string) (context.Context, trace.Span) {
	ctx, span := s.jobs.tracer.Start(ctx, "send "+queue, producer)
	if span.IsRecording() {
		span.SetAttributes(append(telemetry.Messaging(semconv.MessagingOperationTypeSend, queue, id),
			telemetry.Tenant.String(tenant))...)
	}
	return ctx, span
}

// traceCancel records a cancel request in j's trace, as a span from start
// to now linked to the caller's span (the cancel request's own trace).
// outcome is the cancel script's: cancelled, requested or unchanged.
func (s *Store) traceCancel(ctx context.Context, j job.Job, outcome string, start time.Time) {
	if !j.Trace.IsValid() {
		return
	}
	parent := trace.ContextWithRemoteSpanContext(context.Background(), j.Trace)
	attrs := append(telemetry.Messaging(semconv.MessagingOperationName("cancel"), j.Queue, j.ID), telemetry.Tenant.String(j.Tenant))
	_, span := s.jobs.tracer.Start(parent, "cancel "+j.Queue, trace.WithTimestamp(start),
		trace.WithLinks(trace.LinkFromContext(ctx)), trace.WithAttributes(attrs...))
	span.AddEvent(job.EventCancelRequested, trace.WithAttributes(telemetry.Outcome.String(outcome), telemetry.State.String(string(j.State))))
	span.End()
}

// endSpan ends span, marking it failed when err is not nil.
func endSpan(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
