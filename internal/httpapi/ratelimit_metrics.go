package httpapi

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/leasehold/leasehold/ratelimit"
)

// Rate limiter latency buckets, in seconds: a script on a near Redis takes
// well under a millisecond; the top ones catch a Redis that stalls up to
// the RedisTimeout.
var rateLatencyBuckets = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5}

// Values of the decision attribute.
const (
	decisionAllowed     = "allowed"
	decisionRejected    = "rejected"
	decisionShadowed    = "shadowed"    // over the limit, let through by ratelimit.Shadow
	decisionUnavailable = "unavailable" // no decision: the limiter failed, answered 503
)

// rateInstruments are the submission rate limit's metrics. In Prometheus
// form:
//
//	leasehold_ratelimit_decisions_total{tenant, policy, decision, fallback}  counter
//	leasehold_ratelimit_duration_seconds{decision, fallback}                 histogram
//
// decision is allowed, rejected, shadowed or unavailable; fallback is true
// when ratelimit.Fallback decided because Redis did not answer. Tenants are
// the configured API keys' tenants, so the label set stays small.
type rateInstruments struct {
	decisions metric.Int64Counter
	duration  metric.Float64Histogram
}

func newRateInstruments(mp metric.MeterProvider) (*rateInstruments, error) {
	m := mp.Meter(meterName)
	var in rateInstruments
	var err error
	if in.decisions, err = m.Int64Counter("leasehold.ratelimit.decisions",
		metric.WithUnit("{request}"),
		metric.WithDescription("Submission rate limit decisions, by tenant, policy, decision and whether the per-process fallback made them.")); err != nil {
		return nil, err
	}
	in.duration, err = m.Float64Histogram("leasehold.ratelimit.duration",
		metric.WithUnit("s"),
		metric.WithDescription("Time the submission rate limiter took to decide, or to fail."),
		metric.WithExplicitBucketBoundaries(rateLatencyBuckets...))
	return &in, err
}

// allow asks the rate limiter for n units of tenant's submission rate, and
// records the decision and how long it took.
func (s *server) allow(ctx context.Context, tenant string, n int) (ratelimit.Decision, error) {
	start := time.Now()
	d, err := s.rate.Allow(ctx, tenant, n)
	elapsed := time.Since(start).Seconds()
	decision := decisionAllowed
	switch {
	case err != nil:
		decision = decisionUnavailable
	case d.Shadowed:
		decision = decisionShadowed
	case !d.Allowed:
		decision = decisionRejected
	}
	ctx = context.WithoutCancel(ctx)
	fallback := attribute.Bool("fallback", d.Fallback)
	s.rateMetrics.decisions.Add(ctx, 1, metric.WithAttributes(
		attribute.String("tenant", tenant), attribute.String("policy", d.Policy),
		attribute.String("decision", decision), fallback))
	s.rateMetrics.duration.Record(ctx, elapsed, metric.WithAttributes(attribute.String("decision", decision), fallback))
	return d, err
}
