package ratelimit

import (
	"context"

	"github.com/leasehold/leasehold/internal/store"
)

// SlidingWindow approximates a sliding window with the counts of two fixed
// windows, the previous one weighted by how much of it the sliding window
// still covers. Fixed memory; its error bound is in the package doc.
type SlidingWindow struct{ c core }

// NewSlidingWindow returns a sliding window counter on st, which may
// be on a Redis Cluster.
func NewSlidingWindow(st *store.Store, cfg Config) (*SlidingWindow, error) {
	c, err := newCore(st, cfg, store.RateSlidingWindow)
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
	return w.c.allow(ctx, subject, n)
}
