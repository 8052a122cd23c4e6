package schedule

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"

	"github.com/leasehold/leasehold/internal/store"
)

// Defaults of SchedulerConfig.
const (
	DefaultInterval    = 200 * time.Millisecond
	DefaultBatch       = 256
	DefaultHold        = 500 * time.Millisecond
	DefaultConcurrency = 16
)

// SchedulerConfig configures a Scheduler. Zero values mean the defaults.
type SchedulerConfig struct {
	// Interval is how often the due index is read, with ±25% jitter so
	// that a fleet's schedulers spread out; default DefaultInterval
	// (200ms). A fire is late by at most about Interval·1.25 while any
	// scheduler runs.
	Interval time.Duration
	// Batch is the most schedules one read takes, and the most tenants it
	// takes from, an even share of Batch from each; default DefaultBatch
	// (256). A read that left some due is followed by the next at once.
	Batch int
	// Hold is how long a taken schedule is left to this scheduler before
	// another may take it (and fire the same due time, which the
	// idempotency key makes one job); default DefaultHold (500ms). It
	// bounds how late a fire is when its scheduler dies holding it.
	Hold time.Duration
	// Concurrency is how many fires run at once; default
	// DefaultConcurrency (16).
	Concurrency int
	// Limits are the tenants' submission rate and cap that fires count
	// against; default none.
	Limits Limits
	// Logger; default slog.Default().
	Logger *slog.Logger
	// MeterProvider gets the scheduler's metric (leasehold.schedule.fire.lag,
	// in Prometheus leasehold_schedule_fire_lag_seconds); default
	// otel.GetMeterProvider().
	MeterProvider metric.MeterProvider
}

// lagBuckets, in seconds: a fire is due within a read interval (200 ms)
// while a scheduler runs, within a Hold (500 ms) after its scheduler died
// holding it, and seconds late in a burst of thousands due at once.
var lagBuckets = []float64{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}

// Scheduler fires the schedules that come due, on any number of
// processes at once: there is no leader. Each read of the due index takes
// the due schedules for a moment (Hold), so the schedulers of a fleet
// rarely fire the same one; when they do, or when one dies mid-fire,
// Store.Fire still makes one job per due time.
type Scheduler struct {
	store    *Store
	interval time.Duration
	batch    int
	hold     time.Duration
	conc     int
	limits   Limits
	log      *slog.Logger
	lag      metric.Float64Histogram
	fired    func(Result) // test signal: every fire's result; nil outside tests
}

// NewScheduler returns a Scheduler firing store's schedules.
func NewScheduler(store *Store, cfg SchedulerConfig) (*Scheduler, error) {
	if store == nil {
		return nil, errors.New("schedule: nil store")
	}
	if cfg.Interval < 0 || cfg.Batch < 0 || cfg.Hold < 0 || cfg.Concurrency < 0 {
		return nil, errors.New("schedule: negative Interval, Batch, Hold or Concurrency")
	}
	mp := cfg.MeterProvider
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	lag, err := mp.Meter("github.com/leasehold/leasehold/schedule").Float64Histogram("leasehold.schedule.fire.lag",
		metric.WithUnit("s"), metric.WithExplicitBucketBoundaries(lagBuckets...),
		metric.WithDescription("How late each fire was: its job's creation (Redis clock) minus the due time it fired, once per due time."))
	if err != nil {
		return nil, fmt.Errorf("schedule: metrics: %w", err)
	}
	return &Scheduler{
		store:    store,
		lag:      lag,
		interval: cmp.Or(cfg.Interval, DefaultInterval),
		batch:    cmp.Or(cfg.Batch, DefaultBatch),
		hold:     cmp.Or(cfg.Hold, DefaultHold),
		conc:     cmp.Or(cfg.Concurrency, DefaultConcurrency),
		limits:   cfg.Limits,
		log:      cmp.Or(cfg.Logger, slog.Default()),
	}, nil
}

// Run fires due schedules until ctx is done, then returns nil. A Redis
// error is logged and the next read tries again.
func (s *Scheduler) Run(ctx context.Context) error {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		_, more, err := s.runOnce(ctx)
		if err != nil && ctx.Err() == nil {
			s.log.WarnContext(ctx, "schedules: read of the due index failed", "err", err)
		}
		wait := time.Duration(0)
		if !more {
			// ±25% jitter.
			wait = s.interval*3/4 + rand.N(s.interval/2+1)
		}
		t.Reset(wait)
	}
}

// runOnce takes the schedules due now (store.TakeDueSchedules: Batch at
// most, fairly across tenants) and fires each, Concurrency at a time, and returns how
// many it took; more says that more may be due than it took. A fire that
// fails is logged; its hold runs out and a later read takes it again.
func (s *Scheduler) runOnce(ctx context.Context) (n int, more bool, err error) {
	taken, err := s.store.db.TakeDueSchedules(ctx, s.batch, s.hold)
	if err != nil {
		return 0, false, fmt.Errorf("schedule: %w", err)
	}
	now, due := taken.Now, taken.Due
	// Schedulers that took overlapping batches (after a hold ran out)
	// start at different ends.
	rand.Shuffle(len(due), func(i, j int) { due[i], due[j] = due[j], due[i] })
	work := make(chan store.ScheduleRef)
	var wg sync.WaitGroup
	for range min(s.conc, len(due)) {
		wg.Go(func() {
			for t := range work {
				s.fire(ctx, t, now)
			}
		})
	}
	for _, t := range due {
		work <- t
	}
	close(work)
	wg.Wait()
	return len(due), taken.More, nil
}

func (s *Scheduler) fire(ctx context.Context, t store.ScheduleRef, now time.Time) {
	r, err := s.store.Fire(ctx, t.Tenant, t.Name, now, s.limits)
	if err != nil {
		if ctx.Err() == nil {
			s.log.WarnContext(ctx, "schedules: fire failed; it is tried again", "tenant", t.Tenant, "schedule", t.Name, "err", err)
		}
		return
	}
	switch r.Outcome {
	case Fired:
		// Only the call that created the job counts its due time: two
		// schedulers that fire the same one make one job.
		if r.Created && r.Job != nil {
			s.lag.Record(ctx, max(0, r.Job.CreatedAt.Sub(r.Due)).Seconds())
		}
	case Skipped:
		if r.Changed {
			s.log.InfoContext(ctx, "schedules: skipping due times until the last job ends", "tenant", t.Tenant, "schedule", t.Name, "due", r.Due)
		}
	case Deferred:
		if r.Changed {
			s.log.InfoContext(ctx, "schedules: fire deferred, the tenant is over its rate or cap; deferring until it is not", "tenant", t.Tenant, "schedule", t.Name, "due", r.Due, "retry_after", r.RetryAfter)
		}
	}
	if s.fired != nil {
		s.fired(r)
	}
}
