package ratelimit

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"golang.org/x/time/rate"
)

// FallbackConfig configures Fallback.
type FallbackConfig struct {
	// Rate is the limit each process applies on its own, per subject, while
	// Redis does not answer: a token bucket of Rate.Limit per Rate.Period
	// with a burst of Rate.Burst (0 means Rate.Limit). N processes admit up
	// to N times it together, so give each its share of the shared rate.
	// Required.
	Rate Rate
	// Logger receives a Warn line when the fallback takes over and an Info
	// line when Redis answers again; default slog.Default().
	Logger *slog.Logger
	// MeterProvider makes the leasehold.ratelimit.fallback.decisions
	// counter; default otel.GetMeterProvider().
	MeterProvider metric.MeterProvider
}

// Fallback returns a Limiter that asks l and, only when l fails for want of
// Redis, decides with a per-process limit instead (Decision.Fallback set).
// ErrInvalid errors are passed through, and so is any error once ctx is done:
// bad input is no outage, and a caller that gave up needs no decision.
// Taking over and handing back are logged once each; every fallback decision
// is counted. Without Fallback, a limiter returns Redis errors as errors.
func Fallback(l Limiter, cfg FallbackConfig) (Limiter, error) {
	r := cfg.Rate
	if err := r.validate(); err != nil {
		return nil, fmt.Errorf("fallback: %w", err)
	}
	mp := cfg.MeterProvider
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	decisions, err := mp.Meter(meterName).Int64Counter("leasehold.ratelimit.fallback.decisions",
		metric.WithUnit("{request}"),
		metric.WithDescription("Requests decided by the per-process fallback limit while Redis did not answer, by outcome."))
	if err != nil {
		return nil, err
	}
	return &fallback{
		l:         l,
		perSec:    float64(r.Limit) / r.Period.Seconds(),
		burst:     r.burst(),
		policy:    r.policy(true),
		log:       cmp.Or(cfg.Logger, slog.Default()),
		decisions: decisions,
		local:     map[string]*rate.Limiter{},
	}, nil
}

type fallback struct {
	l         Limiter
	perSec    float64
	burst     int
	policy    string
	log       *slog.Logger
	decisions metric.Int64Counter

	down  atomic.Bool
	mu    sync.Mutex
	local map[string]*rate.Limiter // per subject, only while Redis is down
}

func (f *fallback) Allow(ctx context.Context, subject string, n int) (Decision, error) {
	d, err := f.l.Allow(ctx, subject, n)
	switch {
	case err == nil:
		if f.down.CompareAndSwap(true, false) {
			f.mu.Lock()
			clear(f.local) // the next outage starts with full buckets
			f.mu.Unlock()
			f.log.InfoContext(ctx, "ratelimit: redis answers again; the shared limit decides")
		}
		return d, nil
	case errors.Is(err, ErrInvalid), ctx.Err() != nil:
		return d, err
	}
	if n > f.burst {
		return Decision{}, fmt.Errorf("%w: cost %d is more than the fallback's burst of %d", ErrInvalid, n, f.burst)
	}
	if f.down.CompareAndSwap(false, true) {
		f.log.WarnContext(ctx, "ratelimit: redis does not answer; each process limits on its own until it does",
			attrErr, err, attrPolicy, f.policy)
	}
	d = f.decide(subject, n)
	f.decisions.Add(ctx, 1, metric.WithAttributes(attribute.Bool("allowed", d.Allowed)))
	return d, nil
}

// decide asks subject's own in-process bucket.
func (f *fallback) decide(subject string, n int) Decision {
	f.mu.Lock()
	lim, ok := f.local[subject]
	if !ok {
		lim = rate.NewLimiter(rate.Limit(f.perSec), f.burst)
		f.local[subject] = lim
	}
	f.mu.Unlock()

	now := time.Now()
	allowed := lim.AllowN(now, n)
	tokens := lim.TokensAt(now)
	d := Decision{
		Allowed:   allowed,
		Limit:     f.burst,
		Remaining: max(0, int(math.Floor(tokens))),
		Reset:     f.until(float64(f.burst) - tokens),
		Policy:    f.policy,
		Fallback:  true,
	}
	if !allowed {
		d.RetryAfter = f.until(float64(n) - tokens)
	}
	return d
}

// until is the time the bucket takes to gain tokens, rounded up.
func (f *fallback) until(tokens float64) time.Duration {
	return time.Duration(math.Ceil(max(0, tokens) / f.perSec * float64(time.Second)))
}
