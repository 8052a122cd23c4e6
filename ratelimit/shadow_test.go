package ratelimit_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/ratelimit"
)

// logs collects what a logger wrote.
type logs struct{ testenv.Buffer }

func (l *logs) logger() *slog.Logger { return slog.New(slog.NewTextHandler(l, nil)) }

// meter is a MeterProvider whose counters a test can read.
type meter struct {
	*sdkmetric.MeterProvider
	reader *sdkmetric.ManualReader
}

func newMeter(t testing.TB) meter {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	return meter{mp, reader}
}

// count sums counter name's data points that carry every one of attrs.
func (m meter) count(t testing.TB, name string, attrs ...attribute.KeyValue) int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := m.reader.Collect(t.Context(), &rm); err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, sm := range rm.ScopeMetrics {
		for _, metric := range sm.Metrics {
			if metric.Name != name {
				continue
			}
			for _, dp := range metric.Data.(metricdata.Sum[int64]).DataPoints {
				match := true
				for _, a := range attrs {
					v, ok := dp.Attributes.Value(a.Key)
					match = match && ok && v == a.Value
				}
				if match {
					n += dp.Value
				}
			}
		}
	}
	return n
}

// Shadow mode never refuses, and reports every request the limit would
// have refused: in the decision, in a counter and in the log.
func TestShadowAllowsAndReports(t *testing.T) {
	t.Parallel()
	f := newFixture(t, testenv.Redis(t).Client(t), algorithmNamed("fixed_window"), ratelimit.Rate{Limit: 2, Period: time.Hour})
	m, out := newMeter(t), &logs{}
	l, err := ratelimit.Shadow(f.l, ratelimit.ShadowConfig{Logger: out.logger(), MeterProvider: m})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		d, err := l.Allow(t.Context(), "tenant-a", 1)
		if err != nil {
			t.Fatal(err)
		}
		over := i >= 2
		if !d.Allowed || d.Shadowed != over {
			t.Fatalf("request %d: allowed %v, shadowed %v; want allowed, shadowed %v", i, d.Allowed, d.Shadowed, over)
		}
		if over && (d.Remaining != 0 || d.RetryAfter <= 0) {
			t.Fatalf("request %d: remaining %d, retry after %v: want the limit's own answer, 0 and > 0", i, d.Remaining, d.RetryAfter)
		}
	}
	if n := m.count(t, "leasehold.ratelimit.shadowed"); n != 3 {
		t.Fatalf("shadowed counter %d, want 3", n)
	}
	if lines := out.Lines("shadow mode", "subject=tenant-a", "retry_after="); len(lines) != 3 {
		t.Fatalf("%d log lines about tenant-a, want 3:\n%s", len(lines), out.String())
	}

	// Errors are errors still: shadow mode hides refusals, not failures.
	if _, err := l.Allow(t.Context(), "tenant{a}", 1); !errors.Is(err, ratelimit.ErrInvalid) {
		t.Fatalf("bad subject through shadow: %v, want ErrInvalid", err)
	}
}
