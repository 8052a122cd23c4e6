package cli

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/metric"

	"github.com/leasehold/leasehold/internal/store"
	"github.com/leasehold/leasehold/ratelimit"
)

// RateFlags are the per-tenant submission rate's flags. The API spends it
// on each job submitted, and every process's scheduler on each fire, so
// the API and the worker take the same three.
type RateFlags struct {
	rate, mode, fallback *string
}

// Rate defines the rate flags; spentBy says what spends the rate in this
// process, for the help.
func (f *Flags) Rate(spentBy string) RateFlags {
	return RateFlags{
		rate: f.String("rate", "LEASEHOLD_RATE", "",
			"per-tenant submission rate <limit>/<s|m|h>[:<burst>], e.g. 50/s:100, that "+spentBy+" spend, counted in Redis and shared by every process (default unlimited)"),
		mode: f.String("rate-mode", "LEASEHOLD_RATE_MODE", "enforce",
			"enforce: refuse what is over the rate; observe: only log and count what would be refused"),
		fallback: f.String("rate-fallback", "LEASEHOLD_RATE_FALLBACK", "",
			"per-process rate while Redis does not answer, local:<limit>/<s|m|h>[:<burst>], e.g. local:10/s (default none: refused as Redis is)"),
	}
}

// Limiter builds the limiter the flags ask for: a token bucket in Redis,
// under ratelimit.Fallback when a fallback rate is set, under
// ratelimit.Shadow in observe mode. It is nil when no rate is set.
func (r RateFlags) Limiter(rdb redis.UniversalClient, prefix string, log *slog.Logger, meters metric.MeterProvider) (ratelimit.Limiter, error) {
	observe := false
	switch *r.mode {
	case "enforce":
	case "observe":
		observe = true
	default:
		return nil, fmt.Errorf("LEASEHOLD_RATE_MODE (--rate-mode) %q: want enforce or observe", *r.mode)
	}
	if *r.rate == "" {
		if observe || *r.fallback != "" {
			return nil, errors.New("LEASEHOLD_RATE_MODE=observe and LEASEHOLD_RATE_FALLBACK need LEASEHOLD_RATE (--rate)")
		}
		return nil, nil
	}
	rate, err := ratelimit.ParseRate(*r.rate)
	if err != nil {
		return nil, fmt.Errorf("LEASEHOLD_RATE (--rate): %w", err)
	}
	var l ratelimit.Limiter
	if l, err = ratelimit.NewTokenBucket(store.New(rdb, store.Config{Prefix: prefix}), ratelimit.Config{Rate: rate}); err != nil {
		return nil, fmt.Errorf("LEASEHOLD_RATE (--rate): %w", err)
	}
	if *r.fallback != "" {
		local, ok := strings.CutPrefix(*r.fallback, "local:")
		if !ok {
			return nil, fmt.Errorf("LEASEHOLD_RATE_FALLBACK (--rate-fallback) %q: want local:<limit>/<s|m|h>[:<burst>], e.g. local:10/s", *r.fallback)
		}
		fallback, err := ratelimit.ParseRate(local)
		if err != nil {
			return nil, fmt.Errorf("LEASEHOLD_RATE_FALLBACK (--rate-fallback): %w", err)
		}
		if l, err = ratelimit.Fallback(l, ratelimit.FallbackConfig{Rate: fallback, Logger: log, MeterProvider: meters}); err != nil {
			return nil, fmt.Errorf("LEASEHOLD_RATE_FALLBACK (--rate-fallback): %w", err)
		}
	}
	if observe {
		if l, err = ratelimit.Shadow(l, ratelimit.ShadowConfig{Logger: log, MeterProvider: meters}); err != nil {
			return nil, fmt.Errorf("LEASEHOLD_RATE_MODE (--rate-mode): %w", err)
		}
	}
	log.Info("submission rate limit", "rate", rate.String(), "observe", observe, "fallback", *r.fallback != "")
	return l, nil
}
