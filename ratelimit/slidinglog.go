package ratelimit

import (
	"context"
	"math/rand/v2"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/internal/store/scripts"
)

var slidingLogScript = scripts.Load("ratelimit_sliding_log.lua")

// SlidingLog keeps one entry per admitted request and allows at most Limit
// in any window of Period. Exact, and its memory grows with Limit. See the
// package doc.
type SlidingLog struct{ c core }

// NewSlidingLog returns a sliding log limiter on rdb, which may be a Redis
// Cluster client.
func NewSlidingLog(rdb redis.UniversalClient, cfg Config) (*SlidingLog, error) {
	c, err := newCore(rdb, cfg, slidingLogScript, false)
	if err != nil {
		return nil, err
	}
	return &SlidingLog{c}, nil
}

// Allow logs n requests for subject if they fit in the window.
func (l *SlidingLog) Allow(ctx context.Context, subject string, n int) (Decision, error) {
	if err := l.c.check(subject, n); err != nil {
		return Decision{}, err
	}
	// The log's members must be unique: a random 64-bit id per call (the
	// script appends 1..n) makes two calls collide with odds of 2^-64.
	id := strconv.FormatUint(rand.Uint64(), 36)
	return l.c.run(ctx, subject, l.c.keys.RateLog(subject, l.c.rate.Period),
		l.c.rate.Limit, l.c.rate.Period.Microseconds(), n, id)
}
