package ratelimit

import (
	"cmp"
	"context"
	"log/slog"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

const meterName = "github.com/leasehold/leasehold/ratelimit"

// Log attribute keys.
const (
	attrSubject    = "subject"
	attrPolicy     = "policy"
	attrCost       = "cost"
	attrRetryAfter = "retry_after"
	attrErr        = "err"
)

// ShadowConfig configures Shadow. The zero value is ready to use.
type ShadowConfig struct {
	// Logger receives one Info line per request the limit would have
	// refused; default slog.Default().
	Logger *slog.Logger
	// MeterProvider makes the leasehold.ratelimit.shadowed counter; default
	// otel.GetMeterProvider().
	MeterProvider metric.MeterProvider
}

// Shadow returns a Limiter that asks l and allows every request l decides
// on: a limit can be tried on real traffic before it is enforced. A request l
// refuses is allowed with Shadowed set (Remaining, Reset and RetryAfter stay
// l's), counted and logged. Errors are l's errors, unchanged: with Redis
// down, the request's own work fails anyway.
func Shadow(l Limiter, cfg ShadowConfig) (Limiter, error) {
	mp := cfg.MeterProvider
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	over, err := mp.Meter(meterName).Int64Counter("leasehold.ratelimit.shadowed",
		metric.WithUnit("{request}"),
		metric.WithDescription("Requests over the limit that shadow mode let through."))
	if err != nil {
		return nil, err
	}
	return &shadow{l: l, log: cmp.Or(cfg.Logger, slog.Default()), over: over}, nil
}

type shadow struct {
	l    Limiter
	log  *slog.Logger
	over metric.Int64Counter
}

func (s *shadow) Allow(ctx context.Context, subject string, n int) (Decision, error) {
	d, err := s.l.Allow(ctx, subject, n)
	if err != nil || d.Allowed {
		return d, err
	}
	d.Allowed, d.Shadowed = true, true
	s.over.Add(ctx, 1, metric.WithAttributes(attribute.String(attrPolicy, d.Policy)))
	s.log.InfoContext(ctx, "ratelimit: shadow mode let through a request over the limit",
		attrSubject, subject, attrCost, n, attrPolicy, d.Policy, attrRetryAfter, d.RetryAfter)
	return d, nil
}
