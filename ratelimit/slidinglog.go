package ratelimit

import (
	"context"

	"github.com/leasehold/leasehold/internal/store"
)

// SlidingLog keeps one entry per admitted request and allows at most Limit
// in any window of Period. Exact, and its memory grows with Limit. See the
// package doc.
type SlidingLog struct{ c core }

// NewSlidingLog returns a sliding log limiter on st, which may
// be on a Redis Cluster.
func NewSlidingLog(st *store.Store, cfg Config) (*SlidingLog, error) {
	c, err := newCore(st, cfg, store.RateSlidingLog)
	if err != nil {
		return nil, err
	}
	return &SlidingLog{c}, nil
}

// Allow logs n requests for subject if they fit in the window.
func (l *SlidingLog) Allow(ctx context.Context, subject string, n int) (Decision, error) {
	return l.c.allow(ctx, subject, n)
}
