package schedule_test

import (
	"context"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/store"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/leasehold/leasehold/internal/store/keys"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/schedule"
)

// A fire's span is the root of the fired job's trace: the job's submit
// span, whose context the job keeps, is its child.
func TestFireStartsTheJobsTrace(t *testing.T) {
	t.Parallel()
	rdb := testenv.Redis(t).Client(t)
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	prefix := testenv.Prefix(t)
	jobs := store.New(rdb, store.Config{Prefix: prefix, TracerProvider: tp})
	st, err := schedule.NewStore(rdb, schedule.Config{Prefix: prefix, Jobs: jobs, TracerProvider: tp})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, _, err := st.Create(ctx, "acme", every("t", "1h")); err != nil {
		t.Fatal(err)
	}
	fx := fixture{rdb: rdb, store: st, jobs: jobs, keys: keys.New(prefix), prefix: prefix}
	fx.dueAt(t, "acme", "t", time.Now().Add(-time.Second))
	res, err := st.Fire(ctx, "acme", "t", redisNow(t, rdb), schedule.Limits{})
	if err != nil || res.Job == nil {
		t.Fatalf("fire: %+v, %v", res, err)
	}
	var fire, submit *tracetest.SpanStub
	for _, s := range exp.GetSpans() {
		switch {
		case s.Name == "fire t":
			fire = &s
		case s.Name == "send default":
			submit = &s
		}
	}
	if fire == nil || submit == nil {
		t.Fatalf("spans %v: want a fire and a submit", exp.GetSpans())
	}
	if fire.Parent.IsValid() {
		t.Errorf("the fire's span has a parent %v: want the root of a trace", fire.Parent)
	}
	if submit.Parent.SpanID() != fire.SpanContext.SpanID() || res.Job.Trace.TraceID() != fire.SpanContext.TraceID() {
		t.Errorf("the job's trace %v is not the fire's %v", res.Job.Trace.TraceID(), fire.SpanContext.TraceID())
	}
}
