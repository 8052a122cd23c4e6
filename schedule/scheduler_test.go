package schedule_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
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

// Six tenants with ten schedules due each, and tenant b's one due after
// all of theirs: with a Batch of 4, no read takes more than 4, and b's
// fires in the second read, not after the others' sixty.
func TestTakeIsFairAcrossTenants(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, testenv.Redis(t).Client(t))
	s := fx.scheduler(t, nil, schedule.SchedulerConfig{Batch: 4})
	long := redisNow(t, fx.rdb).Add(-10 * time.Second)
	for i := range 6 {
		tenant := fmt.Sprintf("flood%d", i)
		for j := range 10 {
			name := fmt.Sprintf("s%d", j)
			fx.create(t, tenant, every(name, "1h"))
			fx.dueAt(t, tenant, name, long)
		}
	}
	fx.create(t, "b", every("mine", "1h"))
	fx.dueAt(t, "b", "mine", long.Add(5*time.Second))
	var fired atomic.Bool
	s.OnFire(func(res schedule.Result) {
		if res.Tenant == "b" && res.Outcome == schedule.Fired {
			fired.Store(true)
		}
	})
	for read := 1; !fired.Load(); read++ {
		if read > 2 {
			t.Fatalf("b's schedule not fired in %d reads", read-1)
		}
		if n, err := s.RunOnce(t.Context()); err != nil || n > 4 {
			t.Fatalf("read %d took %d, %v", read, n, err)
		}
	}
}

// More tenants due than a read takes: with a Batch of 2 and an Interval of
// an hour, five tenants' schedules all fire from the reads that follow the
// first at once, not one Interval apart.
func TestMoreTenantsDueThanABatchAreReadAtOnce(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, testenv.Redis(t).Client(t))
	past := redisNow(t, fx.rdb).Add(-time.Second)
	for i := range 5 {
		tenant := fmt.Sprintf("t%d", i)
		fx.create(t, tenant, every("s", "1h"))
		fx.dueAt(t, tenant, "s", past)
	}
	s := fx.scheduler(t, nil, schedule.SchedulerConfig{Batch: 2, Interval: time.Hour})
	var fired atomic.Int64
	s.OnFire(func(res schedule.Result) {
		if res.Outcome == schedule.Fired {
			fired.Add(1)
		}
	})
	ctx, stop := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stop()
	wg.Go(func() { _ = s.Run(ctx) })
	testenv.Eventually(t, 10*time.Second, func() bool { return fired.Load() == 5 }, "not all 5 tenants' schedules fired")
}

// maxCommandsPerSkip bounds the Redis commands that one skipped due time
// of an idle "@every 1s" skip schedule costs, the reads of the due index
// included (docs/operations.md, A tenant's schedules).
const maxCommandsPerSkip = 12

// 1,000 idle "@every 1s" schedules with overlap skip, each with its job
// still queued: every due time is skipped, at no more than
// maxCommandsPerSkip Redis commands, and without a log line.
func TestIdleSkipSchedulesCost(t *testing.T) {
	t.Parallel()
	r := testenv.StartRedis(t) // its own: commands are counted server-wide
	fx := newFixture(t, r.Client(t))
	const n = 1000
	for i := range n {
		spec := every(fmt.Sprintf("s-%04d", i), "1s")
		spec.Overlap = schedule.OverlapSkip
		spec.Job.Queue = "idle" // no worker: the first job of each stays queued
		fx.create(t, "acme", spec)
	}
	var logs testenv.Buffer
	s := fx.scheduler(t, nil, schedule.SchedulerConfig{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	var fired, skipped atomic.Int64
	s.OnFire(func(res schedule.Result) {
		switch res.Outcome {
		case schedule.Fired:
			fired.Add(1)
		case schedule.Skipped:
			skipped.Add(1)
		}
	})
	ctx, stop := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stop()
	wg.Go(func() { _ = s.Run(ctx) })
	// Past every first fire and the first skip of each (which logs).
	// A total of skips does not say every schedule has had its first:
	// wait for each one's line.
	testenv.Eventually(t, time.Minute, func() bool {
		return fired.Load() == n && skipped.Load() >= 2*n && len(logs.Lines("schedules:")) >= n
	}, "fired %d, skipped %d", fired.Load(), skipped.Load())
	lines, cmds, skips := len(logs.Lines("schedules:")), testenv.CommandsExecuted(t, fx.rdb), skipped.Load()
	testenv.Eventually(t, time.Minute, func() bool { return skipped.Load() >= skips+3*n }, "skipped %d", skipped.Load())
	perSkip := float64(testenv.CommandsExecuted(t, fx.rdb)-cmds) / float64(skipped.Load()-skips)
	t.Logf("%.2f Redis commands per skipped due time", perSkip)
	if perSkip > maxCommandsPerSkip {
		t.Errorf("%.2f Redis commands per skipped due time, want at most %d", perSkip, maxCommandsPerSkip)
	}
	if more := len(logs.Lines("schedules:")) - lines; more != 0 || fired.Load() != n {
		t.Errorf("%d log lines and %d more fires over %d skips, want none", more, fired.Load()-n, skipped.Load()-skips)
	}
}
