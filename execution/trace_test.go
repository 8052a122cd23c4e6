package execution_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/store"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/leasehold/leasehold/execution"
	"github.com/leasehold/leasehold/internal/store/keys"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/job"
	"github.com/leasehold/leasehold/lease"
)

// TestTraceOfRetriedThenCancelledJob follows one job through the spans it
// leaves: submitted, failed on its first attempt, retried, and cancelled
// while its second attempt runs, the cancel arriving by NATS or found by
// the heartbeat in the job's state (the flag path).
func TestTraceOfRetriedThenCancelledJob(t *testing.T) {
	t.Parallel()
	for _, path := range []string{"nats", "flag"} {
		t.Run(path, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			exp := tracetest.NewInMemoryExporter()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
			store := store.New(f.rdb, store.Config{Prefix: f.prefix, TracerProvider: tp})
			// Only NATS can be fast with a heartbeat a minute apart; no lease
			// may be lost on a loaded machine either way.
			cfg := execution.Config{TracerProvider: tp, Heartbeat: time.Minute, LeaseTTL: 3 * time.Minute}
			if path == "flag" {
				cfg.Heartbeat, cfg.LeaseTTL = 200*time.Millisecond, 10*time.Second
			}
			started := make(chan struct{}, 1)
			f.startWorker(t, cfg, map[string]execution.Handler{
				"flaky": func(ctx context.Context, e *execution.Execution) (any, error) {
					if e.Attempt() == 1 {
						return nil, errBoom
					}
					started <- struct{}{}
					<-ctx.Done()
					return nil, context.Cause(ctx)
				},
			})

			j, _, err := store.Submit(t.Context(), "acme", job.Submission{Kind: "flaky", MaxAttempts: 3}, "")
			if err != nil {
				t.Fatal(err)
			}
			<-started
			f.waitState(t, j.ID, 10*time.Second, job.StateRunning)
			// The cancel request's own span, which the job's cancel span links to.
			reqCtx, req := tp.Tracer("test").Start(t.Context(), "POST /v1/jobs/{id}/cancel")
			if _, err := store.Cancel(reqCtx, "acme", j.ID, false); err != nil {
				t.Fatal(err)
			}
			req.End()
			if path == "nats" {
				if err := f.flags.Request(t.Context(), j.ID, time.Hour); err != nil {
					t.Fatal(err)
				}
			}
			f.waitState(t, j.ID, 10*time.Second, job.StateCancelled)
			// The second execution's span ends just after its finish is written.
			testenv.Eventually(t, 10*time.Second, func() bool {
				return len(named(exp.GetSpans(), "process default")) == 2
			}, "the two execution spans never ended")

			spans := exp.GetSpans()
			submit := one(t, spans, "send default")
			if submit.SpanKind != trace.SpanKindProducer || submit.Parent.IsValid() {
				t.Errorf("submit span: kind %v parent %v, want a producer root", submit.SpanKind, submit.Parent)
			}
			wantAttrs(t, submit, map[string]string{
				"leasehold.job.id": j.ID, "leasehold.tenant": "acme", "leasehold.queue": "default",
				"messaging.system": "leasehold", "messaging.operation.type": "send", "messaging.destination.name": "default",
			})
			for _, s := range spans {
				if s.SpanContext.SpanID() != req.SpanContext().SpanID() && s.SpanContext.TraceID() != submit.SpanContext.TraceID() {
					t.Errorf("span %q is in trace %v, not the job's %v", s.Name, s.SpanContext.TraceID(), submit.SpanContext.TraceID())
				}
			}

			// Executions (and claims) are siblings under the submit span.
			claims, execs := named(spans, "receive default"), named(spans, "process default")
			if len(claims) != 2 {
				t.Fatalf("%d claim spans, want 2", len(claims))
			}
			slices.SortFunc(execs, func(a, b tracetest.SpanStub) int { return a.StartTime.Compare(b.StartTime) })
			for i, s := range append(claims, execs...) {
				if s.Parent.SpanID() != submit.SpanContext.SpanID() {
					t.Errorf("span %d %q: parent %v, want the submit span %v", i, s.Name, s.Parent.SpanID(), submit.SpanContext.SpanID())
				}
				if s.SpanKind != trace.SpanKindConsumer {
					t.Errorf("span %q: kind %v, want consumer", s.Name, s.SpanKind)
				}
			}
			first, second := execs[0], execs[1]
			if len(first.Links) != 0 {
				t.Errorf("first execution has links %v, want none", first.Links)
			}
			if len(second.Links) != 1 || second.Links[0].SpanContext.SpanID() != first.SpanContext.SpanID() {
				t.Errorf("second execution's links %v, want one to the first execution %v", second.Links, first.SpanContext.SpanID())
			}
			wantAttrs(t, first, map[string]string{"leasehold.job.id": j.ID, "leasehold.attempt": "1", "leasehold.tenant": "acme",
				"messaging.operation.type": "process", "messaging.message.id": j.ID})
			wantAttrs(t, second, map[string]string{"leasehold.attempt": "2"})
			for _, s := range execs {
				for _, k := range []string{"leasehold.execution.id", "leasehold.fencing.token"} {
					if attr(s.Attributes, k) == "" {
						t.Errorf("execution span %q has no %s", s.Name, k)
					}
				}
			}
			if attr(first.Attributes, "leasehold.fencing.token") == attr(second.Attributes, "leasehold.fencing.token") {
				t.Error("both executions carry the same fencing token")
			}

			wantEvents(t, "first execution", first, []string{
				"lease acquired",
				"finished leasehold.outcome=failed leasehold.job.state=retrying",
			})
			wantEvents(t, "second execution", second, []string{
				"lease acquired",
				"cancel observed leasehold.cancel.path=" + path,
				"finished leasehold.outcome=cancelled leasehold.job.state=cancelled",
			})

			// Each finish is a span under its execution.
			settles := named(spans, "settle default")
			if len(settles) != 2 {
				t.Fatalf("%d finish spans, want 2", len(settles))
			}
			for _, s := range settles {
				if s.Parent.SpanID() != first.SpanContext.SpanID() && s.Parent.SpanID() != second.SpanContext.SpanID() {
					t.Errorf("finish span's parent %v is no execution", s.Parent.SpanID())
				}
			}

			// The cancel is in the job's trace, linked to the request's.
			c := one(t, spans, "cancel default")
			if c.Parent.SpanID() != submit.SpanContext.SpanID() {
				t.Errorf("cancel span's parent %v, want the submit span", c.Parent.SpanID())
			}
			if len(c.Links) != 1 || c.Links[0].SpanContext.SpanID() != req.SpanContext().SpanID() {
				t.Errorf("cancel span's links %v, want the request's span", c.Links)
			}
			wantEvents(t, "cancel", c, []string{"cancel requested leasehold.outcome=requested leasehold.job.state=running"})
		})
	}
}

// TestTraceOfHandedOffExecution: a worker that shuts down hands its
// running job back, and says so in the execution's span.
func TestTraceOfHandedOffExecution(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	started := make(chan struct{}, 1)
	_, stop := f.startWorker(t, execution.Config{TracerProvider: tp}, map[string]execution.Handler{
		"long": func(ctx context.Context, e *execution.Execution) (any, error) {
			started <- struct{}{}
			return block(ctx, e)
		},
	})
	j := f.submit(t, job.Submission{Kind: "long"})
	<-started
	stop()
	f.waitState(t, j.ID, 10*time.Second, job.StateQueued)
	wantEvents(t, "handed-off execution", one(t, exp.GetSpans(), "process default"), []string{
		"lease acquired",
		"handed off",
		"finished leasehold.outcome=handed_off leasehold.job.state=queued",
	})
}

// TestTraceOfPushback: a job's story with a budget reads in its trace: the
// claim's reservation of the job's cost, the upstream's pushback, and the
// tokens the execution reported.
func TestTraceOfPushback(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	if err := f.store.SetKeyLimit(t.Context(), "model:traced", job.KeyLimit{Budget: job.Budget{TPM: 1000}}); err != nil {
		t.Fatal(err)
	}
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	var calls atomic.Int32
	f.startWorker(t, execution.Config{TracerProvider: tp}, map[string]execution.Handler{
		"llm": func(ctx context.Context, e *execution.Execution) (any, error) {
			if calls.Add(1) == 1 {
				e.ReportTokens(0)
				return nil, execution.Pushback(errors.New("429 Too Many Requests"), 10*time.Millisecond)
			}
			e.ReportTokens(42)
			return "ok", nil
		},
	})
	j := f.submit(t, job.Submission{Kind: "llm", ConcurrencyKeys: []string{"model:traced"}, Cost: &job.Cost{Tokens: 300}, MaxAttempts: 1})
	f.waitState(t, j.ID, 10*time.Second, job.StateSucceeded)
	var spans []tracetest.SpanStub
	testenv.Eventually(t, 5*time.Second, func() bool {
		spans = named(exp.GetSpans(), "process default")
		return len(spans) == 2
	}, "want two process spans")
	wantEvents(t, "pushed back", spans[0], []string{
		"lease acquired", "budget reserved leasehold.tokens=300", "pushback leasehold.retry_after_ms=10",
		"budget settled leasehold.tokens=0", "finished leasehold.outcome=pushback leasehold.job.state=retrying",
	})
	wantEvents(t, "served", spans[1], []string{
		"lease acquired", "budget reserved leasehold.tokens=300", "budget settled leasehold.tokens=42",
		"finished leasehold.outcome=succeeded leasehold.job.state=succeeded",
	})
}

// TestTraceOfBudgetWait: a job that waited in its lane for its key's
// budget (its rpm full) shows the wait in its execution's span, with the
// key and how long; one that waited for a full slot of a key with no
// budget, and one that never waited, do not.
func TestTraceOfBudgetWait(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	if err := f.store.SetKeyLimit(t.Context(), "model:rpm", job.KeyLimit{Budget: job.Budget{RPM: 1}}); err != nil {
		t.Fatal(err)
	}
	if err := f.store.SetLimit(t.Context(), "model:one", 1); err != nil {
		t.Fatal(err)
	}
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	release := make(chan struct{})
	f.startWorker(t, execution.Config{TracerProvider: tp}, map[string]execution.Handler{
		"quick": func(context.Context, *execution.Execution) (any, error) { return "ok", nil },
		"hold": func(ctx context.Context, _ *execution.Execution) (any, error) {
			select {
			case <-release:
			case <-ctx.Done():
			}
			return "ok", nil
		},
	})
	first := f.submit(t, job.Submission{Kind: "quick", ConcurrencyKeys: []string{"model:rpm"}})
	second := f.submit(t, job.Submission{Kind: "quick", ConcurrencyKeys: []string{"model:rpm"}})
	holding := f.submit(t, job.Submission{Kind: "hold", ConcurrencyKeys: []string{"model:one"}})
	behind := f.submit(t, job.Submission{Kind: "hold", ConcurrencyKeys: []string{"model:one"}})
	f.waitState(t, first.ID, 10*time.Second, job.StateSucceeded)
	f.waitState(t, holding.ID, 10*time.Second, job.StateRunning)
	// Many claims pass while the two wait.
	waitedFrom := time.Now()
	testenv.Eventually(t, 5*time.Second, func() bool { return time.Since(waitedFrom) > 300*time.Millisecond }, "")
	if j := f.get(t, second.ID); j.State != job.StateQueued {
		t.Fatalf("the second job of an rpm of 1 is %s, want queued", j.State)
	}
	close(release)
	// The minute rolls on: the window's starts move a minute back.
	w := keys.New(f.prefix).LeaseWindow("model:rpm")
	entries, err := f.rdb.ZRangeWithScores(t.Context(), w, 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		f.rdb.ZAdd(t.Context(), w, redis.Z{Score: e.Score - 61_000, Member: e.Member})
	}
	for _, j := range []job.Job{second, behind} {
		f.waitState(t, j.ID, 10*time.Second, job.StateSucceeded)
	}
	spanOf := func(id string) tracetest.SpanStub {
		var got tracetest.SpanStub
		testenv.Eventually(t, 5*time.Second, func() bool {
			for _, s := range named(exp.GetSpans(), "process default") {
				if attr(s.Attributes, "messaging.message.id") == id {
					got = s
					return true
				}
			}
			return false
		}, "no span of job %s", id)
		return got
	}
	s := spanOf(second.ID)
	var waited int64 = -1
	for _, e := range s.Events {
		if e.Name == execution.EventBudgetWait {
			waited, _ = strconv.ParseInt(attr(e.Attributes, "leasehold.waited_ms"), 10, 64)
		}
	}
	if waited < 300 {
		t.Errorf("the second job waited %d ms for the rpm by its span, want at least 300", waited)
	}
	wantEvents(t, "waited for the rpm", s, []string{
		fmt.Sprintf("budget wait leasehold.key=model:rpm leasehold.waited_ms=%d", waited),
		"lease acquired", "finished leasehold.outcome=succeeded leasehold.job.state=succeeded",
	})
	for what, id := range map[string]string{"never waited": first.ID, "waited for a slot": behind.ID} {
		wantEvents(t, what, spanOf(id), []string{
			"lease acquired", "finished leasehold.outcome=succeeded leasehold.job.state=succeeded",
		})
	}
}

func named(spans tracetest.SpanStubs, name string) []tracetest.SpanStub {
	var out []tracetest.SpanStub
	for _, s := range spans {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

func one(t *testing.T, spans tracetest.SpanStubs, name string) tracetest.SpanStub {
	t.Helper()
	found := named(spans, name)
	if len(found) != 1 {
		t.Fatalf("%d spans named %q, want 1", len(found), name)
	}
	return found[0]
}

func attr(attrs []attribute.KeyValue, key string) string {
	for _, a := range attrs {
		if string(a.Key) == key {
			return a.Value.String()
		}
	}
	return ""
}

func wantAttrs(t *testing.T, s tracetest.SpanStub, want map[string]string) {
	t.Helper()
	for k, v := range want {
		if got := attr(s.Attributes, k); got != v {
			t.Errorf("span %q: %s = %q, want %q", s.Name, k, got, v)
		}
	}
}

// wantEvents compares a span's events, each written as its name and its
// attributes "key=value" in order, with want.
func wantEvents(t *testing.T, what string, s tracetest.SpanStub, want []string) {
	t.Helper()
	var got []string
	for _, e := range s.Events {
		if e.Name == "renew failed" {
			continue // a loaded machine may miss a heartbeat; not what is tested here
		}
		if e.Name == "lease acquired" && attr(e.Attributes, "leasehold.fencing.token") == "" {
			t.Errorf("%s: lease acquired without its fencing token", what)
		}
		parts := []string{e.Name}
		for _, a := range e.Attributes {
			if a.Key != "leasehold.fencing.token" {
				parts = append(parts, fmt.Sprintf("%s=%s", a.Key, a.Value.String()))
			}
		}
		got = append(got, strings.Join(parts, " "))
	}
	if !slices.Equal(got, want) {
		t.Errorf("%s: events\n%s\nwant\n%s", what, strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestTraceOfExecutionThatLostItsLease: Redis goes away under a running
// execution; its span records the failed renewal and the lease lost when
// the trust window ran out.
//
// A heartbeat waits for Redis until the trust window ends, so the renewal
// is found failed as the lease is found lost: the two events may come in
// either order. The handler returns only once both are in its live span,
// so neither can come after the span ends.
func TestTraceOfExecutionThatLostItsLease(t *testing.T) {
	t.Parallel()
	srv := testenv.StartRedis(t)
	f := newFixtureOn(t, srv.Client(t), testenv.NATS(t).Conn(t))
	exp := tracetest.NewInMemoryExporter()
	live := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithSpanProcessor(live))
	started, stopped, proceed := make(chan struct{}, 1), make(chan error, 1), make(chan struct{})
	_, stop := f.startWorker(t, execution.Config{TracerProvider: tp, Logger: slog.New(slog.DiscardHandler)},
		map[string]execution.Handler{
			"long": func(ctx context.Context, e *execution.Execution) (any, error) {
				started <- struct{}{}
				<-ctx.Done()
				stopped <- context.Cause(ctx)
				<-proceed
				return nil, context.Cause(ctx)
			},
		})
	f.submit(t, job.Submission{Kind: "long"})
	<-started
	srv.Kill(t)
	select {
	case cause := <-stopped:
		if !errors.Is(cause, lease.ErrLost) {
			t.Fatalf("handler stopped with %v, want lease.ErrLost", cause)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the handler never stopped after Redis went away")
	}
	eventsOf := func(events []sdktrace.Event) (names []string) {
		for _, e := range events {
			names = append(names, e.Name)
		}
		return names
	}
	testenv.Eventually(t, 10*time.Second, func() bool {
		for _, s := range live.Started() {
			if names := eventsOf(s.Events()); s.Name() == "process default" &&
				slices.Contains(names, execution.EventRenewFailed) && slices.Contains(names, execution.EventLeaseLost) {
				return true
			}
		}
		return false
	}, "the execution's span never recorded both a failed renewal and the lease lost")
	close(proceed)
	stop()
	names := eventsOf(one(t, exp.GetSpans(), "process default").Events)
	// One "renew failed" for the whole outage, not one per heartbeat.
	first := []string{execution.EventLeaseAcquired, execution.EventRenewFailed, execution.EventLeaseLost}
	swapped := []string{execution.EventLeaseAcquired, execution.EventLeaseLost, execution.EventRenewFailed}
	if got := names[:min(3, len(names))]; !slices.Equal(got, first) && !slices.Equal(got, swapped) ||
		strings.Count(strings.Join(names, "|"), execution.EventRenewFailed) != 1 {
		t.Errorf("the execution's events are %q, want %q first (the last two in either order) and one %q", names, first, execution.EventRenewFailed)
	}
}
