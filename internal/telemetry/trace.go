package telemetry

import (
	"context"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// scopeName names the tracer of every Leasehold package.
const scopeName = "github.com/leasehold/leasehold"

// Tracer is Leasehold's tracer from tp, or from the global provider when tp
// is nil.
func Tracer(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	return tp.Tracer(scopeName)
}

// Attribute keys of Leasehold's spans, where OpenTelemetry's semantic
// conventions have none.
const (
	JobID        = attribute.Key("leasehold.job.id")
	ExecutionID  = attribute.Key("leasehold.execution.id")
	FencingToken = attribute.Key("leasehold.fencing.token")
	Attempt      = attribute.Key("leasehold.attempt")
	Queue        = attribute.Key("leasehold.queue")
	Tenant       = attribute.Key("leasehold.tenant")
	Outcome      = attribute.Key("leasehold.outcome")
	State        = attribute.Key("leasehold.job.state")
	CancelPath   = attribute.Key("leasehold.cancel.path")
	Signal       = attribute.Key("leasehold.signal") // the name a wait waits for, or a signal's
)

// MessagingSystem is the messaging.system of Leasehold's spans.
const MessagingSystem = "leasehold"

// Messaging returns the attributes of op (semconv.MessagingOperationTypeSend,
// Receive, Process or Settle) on job id in queue.
func Messaging(op attribute.KeyValue, queue, id string) []attribute.KeyValue {
	return []attribute.KeyValue{
		semconv.MessagingSystemKey.String(MessagingSystem),
		op,
		semconv.MessagingDestinationName(queue),
		semconv.MessagingMessageID(id),
		Queue.String(queue),
		JobID.String(id),
	}
}

// Encode returns sc as a W3C traceparent, the form a span context is
// stored in with its job; "" when sc is not valid (tracing is off).
func Encode(sc trace.SpanContext) string {
	if !sc.IsValid() {
		return ""
	}
	c := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(trace.ContextWithSpanContext(context.Background(), sc), c)
	return c["traceparent"]
}

// Decode parses a traceparent Encode wrote. It returns an invalid span
// context for "" or anything malformed: the job then has no trace to join.
func Decode(traceparent string) trace.SpanContext {
	if traceparent == "" {
		return trace.SpanContext{}
	}
	ctx := propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{"traceparent": traceparent})
	return trace.SpanContextFromContext(ctx)
}
