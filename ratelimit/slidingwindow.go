package ratelimit

import (
	"context"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/internal/store/scripts"
)

var slidingWindowScript = scripts.Load("ratelimit_sliding_window.lua")

// SlidingWindow approximates a sliding window with the counts of two fixed
// windows, the previous one weighted by how much of it the sliding window
// still covers. Fixed memory; its error bound is in the package doc.
type SlidingWindow struct{ c core }

// NewSlidingWindow returns a sliding window counter on rdb, which may be a
// Redis Cluster client.
func NewSlidingWindow(rdb redis.UniversalClient, cfg Config) (*SlidingWindow, error) {
	c, err := newCore(rdb, cfg, slidingWindowScript, false)
	if err != nil {
		return nil, err
	}
	if err := c.exact(); err != nil {
		return nil, err
	}
	return &SlidingWindow{c}, nil
}

// Allow counts n requests for subject if the weighted count leaves room.
func (w *SlidingWindow) Allow(ctx context.Context, subject string, n int) (Decision, error) {
	if err := w.c.check(subject, n); err != nil {
		return Decision{}, err
	}
	return w.c.run(ctx, subject, w.c.keys.RateWindow(subject, w.c.rate.Period),
		w.c.rate.Limit, w.c.rate.Period.Microseconds(), n)
}
