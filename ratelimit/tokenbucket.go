package ratelimit

import (
	"context"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/internal/store/scripts"
)

var tokenBucketScript = scripts.Load("ratelimit_token_bucket.lua")

// TokenBucket lets a subject spend up to Burst tokens at once and refills
// Limit tokens per Period, continuously. See the package doc.
type TokenBucket struct{ c core }

// NewTokenBucket returns a token bucket limiter on rdb, which may be a Redis
// Cluster client.
func NewTokenBucket(rdb redis.UniversalClient, cfg Config) (*TokenBucket, error) {
	c, err := newCore(rdb, cfg, tokenBucketScript, true)
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
	if err := b.c.check(subject, n); err != nil {
		return Decision{}, err
	}
	return b.c.run(ctx, subject, b.c.keys.RateBucket(subject),
		b.c.rate.Limit, b.c.rate.Period.Microseconds(), b.c.limit, n)
}
