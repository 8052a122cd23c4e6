package execution

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/leasehold/leasehold/internal/telemetry"
	"github.com/leasehold/leasehold/job"
	"github.com/leasehold/leasehold/lease"
)

// Span events of an execution's span.
const (
	EventLeaseAcquired  = "lease acquired"
	EventRenewFailed    = "renew failed"
	EventCancelObserved = "cancel observed" // leasehold.cancel.path: nats or flag
	EventLeaseLost      = "lease lost"
	EventHandedOff      = "handed off"
	EventFinished       = "finished" // leasehold.outcome, leasehold.job.state
	// The budgets of the execution's keys (see docs/architecture.md,
	// "Upstream budgets and adaptive limits"): how long its job waited in
	// its lane for a key's budget (throttled, rpm or tpm full, or the
	// effective limit reached), what its claim reserved of their tpm, the
	// upstream's refusal for capacity, and the tokens it reported, which
	// replace the estimate.
	EventBudgetWait     = "budget wait"     // leasehold.key, leasehold.waited_ms, at the claim
	EventBudgetReserved = "budget reserved" // leasehold.tokens, at the claim
	EventPushback       = "pushback"        // leasehold.retry_after_ms
	EventBudgetSettled  = "budget settled"  // leasehold.tokens
	// A wait (leasehold.signal: the name it waits for, leasehold.wait_ms:
	// its timeout), the signal or timeout that resumed the execution
	// (leasehold.signal, leasehold.timed_out; its span links to the one
	// that waited), and each checkpoint saved (leasehold.bytes).
	EventWait       = "wait"
	EventResumed    = "resumed"
	EventCheckpoint = "checkpoint"
)

// The heartbeat reads the job's cancel state in Redis, which is the flag
// path as far as a trace is concerned: not the NATS message.
const cancelPathFlag = "flag"

// execTrace is an execution's place in its job's trace: a span that is a
// child of the job's submit span, linked to the previous attempt's span.
type execTrace struct {
	parent   trace.SpanContext // the job's submit span
	previous trace.SpanContext // the span of the job's last finished execution
	span     trace.Span        // this execution's; nil until it starts

	cancelSeen  atomic.Bool // the first observation of a cancel is recorded, not every one
	renewFailed atomic.Bool // in a run of failed renewals: only its first is recorded
	unwatchLost func()      // stops watching for a lost lease, or waits for its event
}

// consumer is the kind of an execution's spans, made once.
var consumer = trace.WithSpanKind(trace.SpanKindConsumer)

// traceStart records e's claim, sent at sent, as a span in its job's trace,
// and starts e's own span there. It returns ctx carrying e's span, so a
// handler's spans are its children.
func (w *Worker) traceStart(ctx context.Context, e *Execution, sent time.Time) context.Context {
	parent := trace.ContextWithRemoteSpanContext(ctx, e.trace.parent)
	attrs := append(telemetry.Messaging(semconv.MessagingOperationTypeReceive, e.Queue, e.JobID),
		telemetry.ExecutionID.String(e.ID), telemetry.Attempt.Int(e.attempt), telemetry.Tenant.String(e.Tenant),
		telemetry.FencingToken.Int64(int64(e.token)), semconv.MessagingClientID(w.cfg.ID))
	_, claim := w.tracer.Start(parent, "receive "+e.Queue, consumer,
		trace.WithTimestamp(sent), trace.WithAttributes(attrs...))
	claim.End()
	if !claim.SpanContext().IsValid() {
		// Only a no-op tracer makes a span with no context (and only from a
		// parent with none): it would make nothing of the execution's own
		// spans either, so they are not made. The handler's context
		// carries the parent's (invalid) span context, as it would have.
		e.trace.span = trace.SpanFromContext(parent)
		return parent
	}

	var links []trace.Link
	if e.trace.previous.IsValid() {
		links = append(links, trace.Link{SpanContext: e.trace.previous})
	}
	attrs[1] = semconv.MessagingOperationTypeProcess
	ctx, e.trace.span = w.tracer.Start(parent, "process "+e.Queue, consumer,
		trace.WithLinks(links...), trace.WithAttributes(attrs...))
	span := e.trace.span
	if !span.IsRecording() {
		// Events would be dropped: save each execution the work of making
		// them, and the watch for a lost lease.
		return ctx
	}
	if w := e.waited; w.key != "" {
		span.AddEvent(EventBudgetWait, trace.WithTimestamp(e.granted), trace.WithAttributes(
			attribute.String("leasehold.key", w.key), attribute.Int64("leasehold.waited_ms", e.granted.Sub(w.since).Milliseconds())))
	}
	span.AddEvent(EventLeaseAcquired, trace.WithAttributes(telemetry.FencingToken.Int64(int64(e.token))))
	if sig := e.resume.Signal; sig != nil {
		span.AddEvent(EventResumed, trace.WithAttributes(telemetry.Signal.String(sig.Name),
			attribute.Bool("leasehold.timed_out", sig.TimedOut)))
	}
	done := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(done)
		if errors.Is(context.Cause(ctx), lease.ErrLost) {
			span.AddEvent(EventLeaseLost)
		}
	})
	// Once the handler returned, the event is either written or never will
	// be: wait for it, so it lands before the span ends.
	e.trace.unwatchLost = func() {
		if !stop() {
			<-done
		}
	}
	return ctx
}

// traceCancel records that e learned of a cancel request by path (nats or
// flag), the first time only.
func (e *Execution) traceCancel(path string) {
	if e.trace.span != nil && e.trace.cancelSeen.CompareAndSwap(false, true) {
		e.trace.span.AddEvent(EventCancelObserved, trace.WithAttributes(telemetry.CancelPath.String(path)))
	}
}

// traceCheckpoint records a checkpoint of n bytes saved.
func (e *Execution) traceCheckpoint(n int) {
	if e.trace.span != nil && e.trace.span.IsRecording() {
		e.trace.span.AddEvent(EventCheckpoint, trace.WithAttributes(attribute.Int("leasehold.bytes", n)))
	}
}

// traceRenewFailed records a failed heartbeat on each execution it was for:
// the first of a run of failures, so that a long outage, a heartbeat every
// few seconds, does not fill the span with copies of one event.
func traceRenewFailed(rs []*running, err error) {
	for _, r := range rs {
		if r.e.trace.span != nil && r.e.trace.renewFailed.CompareAndSwap(false, true) {
			r.e.trace.span.AddEvent(EventRenewFailed, trace.WithAttributes(semconv.ExceptionMessage(err.Error())))
		}
	}
}

// traceRenewed ends a run of failed renewals: the next failure is recorded.
func (e *Execution) traceRenewed() { e.trace.renewFailed.Store(false) }

// traceFinish starts the span of e's finish, ended with e's own span by the
// returned func, which records how the execution ended (o) and what became
// of its job (state, or the error that kept the finish from being written).
func (w *Worker) traceFinish(ctx context.Context, e *Execution, o outcome) func(job.State, error) {
	if e.trace.unwatchLost != nil {
		e.trace.unwatchLost()
	}
	if !e.trace.span.SpanContext().IsValid() {
		return func(job.State, error) {} // a no-op tracer: see traceStart
	}
	_, settle := w.tracer.Start(ctx, "settle "+e.Queue, trace.WithAttributes(
		append(telemetry.Messaging(semconv.MessagingOperationTypeSettle, e.Queue, e.JobID),
			telemetry.ExecutionID.String(e.ID), telemetry.Outcome.String(string(o.state)))...))
	return func(state job.State, err error) {
		span := e.trace.span
		if err != nil {
			settle.RecordError(err)
			settle.SetStatus(codes.Error, err.Error())
		}
		settle.End()
		defer span.End()
		if !span.IsRecording() {
			return // the events and status would be dropped
		}
		if e.cost > 0 {
			span.AddEvent(EventBudgetReserved, trace.WithTimestamp(e.granted),
				trace.WithAttributes(attribute.Int64("leasehold.tokens", e.cost)))
		}
		switch o.state {
		case StateHandedOff:
			span.AddEvent(EventHandedOff)
		case StatePushback:
			span.AddEvent(EventPushback, trace.WithAttributes(attribute.Int64("leasehold.retry_after_ms", o.minBackoff.Milliseconds())))
		case StateWaiting:
			span.AddEvent(EventWait, trace.WithAttributes(telemetry.Signal.String(o.wait.For),
				attribute.Int64("leasehold.wait_ms", o.wait.Timeout.Milliseconds())))
		}
		if n := e.tokens(); n >= 0 {
			span.AddEvent(EventBudgetSettled, trace.WithAttributes(attribute.Int64("leasehold.tokens", n)))
		}
		span.AddEvent(EventFinished, trace.WithAttributes(telemetry.Outcome.String(string(o.state)), telemetry.State.String(string(state))))
		if o.err != nil && o.state != StateHandedOff {
			span.SetStatus(codes.Error, o.err.Error())
		}
	}
}

// traceparent is e's span context as the finish script stores it, for the
// next attempt to link to.
func (e *Execution) traceparent() string {
	if e.trace.span == nil || !e.trace.span.SpanContext().IsValid() {
		return "" // what Encode makes of it, without its allocations
	}
	return telemetry.Encode(e.trace.span.SpanContext())
}

// budgetWait is a job's wait in its lane for a key's budget: since when
// this worker's claims saw it refused, and by which key.
type budgetWait struct {
	since time.Time
	key   string
}

// budgetWaits holds the budget waits a queue's claims saw, by job id,
// until the job is claimed. A job another worker claims leaves its entry
// here: at maxBudgetWaits entries those older than an hour are dropped,
// and new waits are not recorded while it stays full. A wait seen only by
// other workers than the one that claims the job is not in its trace.
type budgetWaits struct {
	mu sync.Mutex
	m  map[string]budgetWait
}

const maxBudgetWaits = 10_000

// start records that job waits for key's budget since at, unless it
// already waited.
func (b *budgetWaits) start(job, key string, at time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.m[job]; ok {
		return
	}
	if b.m == nil {
		b.m = map[string]budgetWait{}
	}
	if len(b.m) >= maxBudgetWaits {
		for id, w := range b.m {
			if at.Sub(w.since) > time.Hour {
				delete(b.m, id)
			}
		}
		if len(b.m) >= maxBudgetWaits {
			return
		}
	}
	b.m[job] = budgetWait{since: at, key: key}
}

// end returns job's wait, if any, and forgets it: the job was claimed.
func (b *budgetWaits) end(job string) budgetWait {
	b.mu.Lock()
	defer b.mu.Unlock()
	w := b.m[job]
	delete(b.m, job)
	return w
}

// claimedTrace is the trace of a claimed job, from the claim script's
// trace and exec_trace values (nil for a job submitted before tracing).
func claimedTrace(parent, previous any) execTrace {
	p, _ := parent.(string)
	prev, _ := previous.(string)
	return execTrace{parent: telemetry.Decode(p), previous: telemetry.Decode(prev)}
}
