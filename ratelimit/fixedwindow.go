package ratelimit

import (
	"context"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/internal/store/scripts"
)

var fixedWindowScript = scripts.Load("ratelimit_fixed_window.lua")

// FixedWindow counts requests per window of Period, aligned on the Redis
// clock, and allows Limit per window. The cheapest, and it lets up to twice
// Limit through across a window boundary. See the package doc.
type FixedWindow struct{ c core }

// NewFixedWindow returns a fixed window limiter on rdb, which may be a Redis
// Cluster client.
func NewFixedWindow(rdb redis.UniversalClient, cfg Config) (*FixedWindow, error) {
	c, err := newCore(rdb, cfg, fixedWindowScript, false)
	if err != nil {
		return nil, err
	}
	return &FixedWindow{c}, nil
}

// Allow counts n requests for subject if the current window has room.
func (w *FixedWindow) Allow(ctx context.Context, subject string, n int) (Decision, error) {
	if err := w.c.check(subject, n); err != nil {
		return Decision{}, err
	}
	return w.c.run(ctx, subject, w.c.keys.RateFixed(subject, w.c.rate.Period),
		w.c.rate.Limit, w.c.rate.Period.Microseconds(), n)
}
