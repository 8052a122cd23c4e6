package schedule_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/leasehold/leasehold/execution"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/job"
	"github.com/leasehold/leasehold/kinds"
	"github.com/leasehold/leasehold/schedule"
)

// overlap "skip" with jobs that outlast the interval, two schedulers and a
// real worker: at every fire, at most one of the schedule's jobs has not
// ended, and some due times are skipped for it.
func TestOverlapSkipNeverHasTwoJobsNotEnded(t *testing.T) {
	t.Parallel()
	r := testenv.Redis(t)
	fx := newFixture(t, r.Client(t))
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	w, err := execution.NewWorker(r.Client(t), execution.Config{Prefix: fx.prefix, Heartbeat: 500 * time.Millisecond, LeaseTTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	kinds.Register(w, kinds.SleepConfig{}, kinds.LLMConfig{})
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stop()
	wg.Go(func() { _ = w.Run(ctx) })

	spec := schedule.Spec{Name: "slow", Cron: "@every 1s", Overlap: schedule.OverlapSkip,
		Job: job.Submission{Kind: "sleep", Input: json.RawMessage(`{"duration": "1500ms", "tick": "500ms"}`)}}
	fx.create(t, "acme", spec)

	var mu sync.Mutex
	outcomes := map[schedule.Outcome]int{}
	check := func(res schedule.Result) {
		mu.Lock()
		defer mu.Unlock()
		outcomes[res.Outcome]++
		unended := 0
		for _, j := range fx.jobsOf(t, "acme") {
			if !j.State.Terminal() {
				unended++
			}
		}
		if unended > 1 {
			t.Errorf("after a fire (%s): %d of the schedule's jobs not ended", res.Outcome, unended)
		}
	}
	for range 2 {
		s := fx.scheduler(t, r.Client(t), schedule.SchedulerConfig{})
		s.OnFire(check)
		wg.Go(func() { _ = s.Run(ctx) })
	}
	testenv.Eventually(t, 30*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return outcomes[schedule.Fired] >= 3 && outcomes[schedule.Skipped] >= 2
	}, "fires and skips: %v", outcomes)
	stop()
}

// TestFireLagIsRecordedOncePerDueTime: a schedule due two seconds ago
// fires; the scheduler's histogram has that one fire, about two seconds
// late, and a read with nothing due adds none.
func TestFireLagIsRecordedOncePerDueTime(t *testing.T) {
	t.Parallel()
	r := testenv.Redis(t)
	fx := newFixture(t, r.Client(t))
	reader := sdkmetric.NewManualReader()
	s := fx.scheduler(t, nil, schedule.SchedulerConfig{MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))})
	fx.create(t, "acme", schedule.Spec{Name: "late", Cron: "@every 1h", Job: job.Submission{Kind: "sleep"}})
	fx.dueAt(t, "acme", "late", time.Now().Add(-2*time.Second))
	for range 2 {
		if _, err := s.RunOnce(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(t.Context(), &rm); err != nil {
		t.Fatal(err)
	}
	var points []metricdata.HistogramDataPoint[float64]
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if h, ok := m.Data.(metricdata.Histogram[float64]); ok && m.Name == "leasehold.schedule.fire.lag" {
				points = append(points, h.DataPoints...)
			}
		}
	}
	if len(points) != 1 || points[0].Count != 1 {
		t.Fatalf("fire lag points %+v, want one of one fire", points)
	}
	if lag := points[0].Sum; lag < 1.9 {
		t.Fatalf("the fire of a due time 2 s past was %.3f s late by the histogram", lag)
	}
}

// A run of due times skipped while the last job runs is logged once, when
// it begins, not once per due time; a fire ends the run, and the next run
// of skips is logged once again.
func TestSkipsAreLoggedOncePerRun(t *testing.T) {
	t.Parallel()
	r := testenv.Redis(t)
	fx := newFixture(t, r.Client(t))
	var logs testenv.Buffer
	s := fx.scheduler(t, nil, schedule.SchedulerConfig{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	spec := every("tick", "1h")
	spec.Overlap = schedule.OverlapSkip
	fx.create(t, "acme", spec)
	var outcomes []schedule.Outcome
	s.OnFire(func(res schedule.Result) { outcomes = append(outcomes, res.Outcome) })
	due := func(times int) {
		t.Helper()
		for range times {
			fx.dueAt(t, "acme", "tick", redisNow(t, fx.rdb).Add(-time.Second))
			if n, err := s.RunOnce(t.Context()); err != nil || n != 1 {
				t.Fatalf("took %d, %v", n, err)
			}
		}
	}
	due(6) // one fire, then five skips: the job stays queued
	if skips := logs.Lines("skipping"); len(skips) != 1 {
		t.Fatalf("after %v: %d skip lines, want 1:\n%s", outcomes, len(skips), logs.String())
	}
	for _, j := range fx.jobsOf(t, "acme") {
		if _, err := fx.jobs.Cancel(t.Context(), "acme", j.ID, false); err != nil {
			t.Fatal(err)
		}
	}
	due(4) // one fire, then three skips
	want := []schedule.Outcome{"fired", "skipped", "skipped", "skipped", "skipped", "skipped", "fired", "skipped", "skipped", "skipped"}
	if !slices.Equal(outcomes, want) {
		t.Fatalf("outcomes %v, want %v", outcomes, want)
	}
	if skips := logs.Lines("skipping"); len(skips) != 2 {
		t.Fatalf("%d skip lines, want 2:\n%s", len(skips), logs.String())
	}
}
