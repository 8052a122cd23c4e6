package ratelimit

import (
	"context"

	"github.com/leasehold/leasehold/internal/store"
)

// TokenBucket lets a subject spend up to Burst tokens at once and refills
// Limit tokens per Period, continuously. See the package doc.
type TokenBucket struct{ c core }

// NewTokenBucket returns a token bucket limiter on st, which may
// be on a Redis Cluster.
func NewTokenBucket(st *store.Store, cfg Config) (*TokenBucket, error) {
	c, err := newCore(st, cfg, store.RateTokenBucket)
	if err != nil {
		return nil, err
	}
	if err := c.exact(); err != nil {
		return nil, err
	}
	return &TokenBucket{c}, nil
}

// Allow takes n tokens from subject's bucket if it holds n. An n larger
// than the burst could never be allowed and is refused with ErrInvalid.
func (b *TokenBucket) Allow(ctx context.Context, subject string, n int) (Decision, error) {
	return b.c.allow(ctx, subject, n)
}
