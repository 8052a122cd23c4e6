package ratelimit

import (
	"context"

	"github.com/leasehold/leasehold/internal/store"
)

// FixedWindow counts requests per window of Period, aligned on the Redis
// clock, and allows Limit per window. The cheapest, and it lets up to twice
// Limit through across a window boundary. See the package doc.
type FixedWindow struct{ c core }

// NewFixedWindow returns a fixed window limiter on st, which may
// be on a Redis Cluster.
func NewFixedWindow(st *store.Store, cfg Config) (*FixedWindow, error) {
	c, err := newCore(st, cfg, store.RateFixedWindow)
	if err != nil {
		return nil, err
	}
	return &FixedWindow{c}, nil
}

// Allow counts n requests for subject if the current window has room.
func (w *FixedWindow) Allow(ctx context.Context, subject string, n int) (Decision, error) {
	return w.c.allow(ctx, subject, n)
}
