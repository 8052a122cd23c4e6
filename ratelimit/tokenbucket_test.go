package ratelimit_test

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/ratelimit"
)

// 10 tokens per second (one per 100ms), up to 5 at once.
var bucketRate = ratelimit.Rate{Limit: 10, Period: time.Second, Burst: 5}

const tokenUS = 100_000 // µs per token at bucketRate

// tokensIn is how many tokens bucketRate refills in v µs.
func tokensIn(v int64) float64 { return float64(v) / tokenUS }

// A full bucket lets a burst through at once, and no more until it refills.
func TestTokenBucketBurst(t *testing.T) {
	eachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		f := newFixture(t, rdb, algorithmNamed("token_bucket"), bucketRate)
		conclusive(t, func(s string) bool {
			first := f.mustAllow(s, 1)
			for i := 1; i < 5; i++ {
				c := f.mustAllow(s, 1)
				// A new bucket is full: 5 - (i+1) tokens left, plus what
				// refilled since the first call (capped at the burst).
				lo := 4 - i
				hi := min(4, int(math.Floor(float64(4-i)+tokensIn(c.a-first.b))))
				if c.d.Remaining < lo || c.d.Remaining > hi {
					t.Fatalf("call %d: remaining %d, want within [%d, %d]", i, c.d.Remaining, lo, hi)
				}
			}
			over := f.allow(s, 1)
			if over.a-first.b >= tokenUS {
				return false // a token may have refilled: nothing to prove
			}
			if over.d.Allowed {
				t.Fatalf("a 6th request within %v of a burst of 5 was allowed: %+v", us(over.a-first.b), over.d)
			}
			return true
		})
	})
}

// Tokens come back at the rate, no faster and no slower, and a request
// costing n waits for n of them; RetryAfter says how long.
func TestTokenBucketRefillRate(t *testing.T) {
	eachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		f := newFixture(t, rdb, algorithmNamed("token_bucket"), bucketRate)
		conclusive(t, func(s string) bool {
			drain := f.mustAllow(s, 5)
			if drain.d.Remaining != 0 {
				t.Fatalf("remaining %d after taking the whole burst of a new bucket, want 0", drain.d.Remaining)
			}

			f.waitUntil(s, drain.a+3*tokenUS)
			three := f.mustAllow(s, 3) // at least 3 tokens are back
			lo := int(math.Floor(tokensIn(three.b-drain.a))) - 3
			hi := min(5, int(math.Floor(tokensIn(three.a-drain.b)))) - 3
			if three.d.Remaining < lo || three.d.Remaining > hi {
				t.Fatalf("remaining %d after 3 tokens, want within [%d, %d]", three.d.Remaining, lo, hi)
			}

			again := f.allow(s, 3)
			most := tokensIn(again.a-drain.b) - 3 // the tokens there can be now
			if most >= 3 {
				return false
			}
			if again.d.Allowed {
				t.Fatalf("3 more tokens allowed %v after the drain, when at most %.2f were back", us(again.a-drain.b), most)
			}
			// RetryAfter is the time until 3 tokens are there.
			least := max(0, tokensIn(again.b-drain.a)-3)
			within(t, "retry after", again.d.RetryAfter,
				us(int64((3-most)*tokenUS)), us(int64(math.Ceil((3-least)*tokenUS))))
			// Reset, until the bucket is full, is 2 tokens more.
			if got := again.d.Reset - again.d.RetryAfter; got != 2*us(tokenUS) {
				t.Fatalf("reset %v - retry after %v = %v, want the time of 2 tokens, %v", again.d.Reset, again.d.RetryAfter, got, 2*us(tokenUS))
			}

			f.waitUntil(s, again.a+again.d.RetryAfter.Microseconds())
			f.mustAllow(s, 3)
			return true
		})
	})
}

// A bucket never holds more than its burst, however long it was left alone,
// even when its key outlives the refill (restored from a backup, say):
// without the key's expiry to hide it, the script's own cap is what counts.
func TestTokenBucketCapsAtBurst(t *testing.T) {
	eachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		f := newFixture(t, rdb, algorithmNamed("token_bucket"), bucketRate)
		conclusive(t, func(s string) bool {
			f.mustAllow(s, 1)
			if !rdb.Persist(t.Context(), f.key(s)).Val() {
				t.Fatal("no bucket key to keep")
			}
			quiet := f.now(s)
			// Long enough to refill 8 tokens, were there no cap.
			f.waitUntil(s, quiet+8*tokenUS)
			drain := f.mustAllow(s, 5)
			if drain.d.Remaining != 0 {
				t.Fatalf("remaining %d after taking 5 from a bucket capped at 5, want 0", drain.d.Remaining)
			}
			over := f.allow(s, 1)
			if over.a-drain.b >= tokenUS {
				return false
			}
			if over.d.Allowed {
				t.Fatalf("a 6th token taken right after draining a full bucket: the bucket held more than its burst")
			}
			return true
		})
	})
}

// A cost above the burst could never be met: it is refused as bad input,
// not as a 429 the client would retry forever.
func TestTokenBucketCostAboveBurstIsAnError(t *testing.T) {
	eachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		f := newFixture(t, rdb, algorithmNamed("token_bucket"), bucketRate)
		_, err := f.l.Allow(t.Context(), "s", 6)
		if !errors.Is(err, ratelimit.ErrInvalid) || !strings.Contains(err.Error(), "cost 6 is more than the 5") {
			t.Fatalf("cost 6 with a burst of 5: %v, want ErrInvalid", err)
		}
		if n := rdb.Exists(t.Context(), f.key("s")).Val(); n != 0 {
			t.Fatalf("a refused request wrote the bucket")
		}
	})
}

// The key lives as long as the bucket is not full, and no longer.
func TestTokenBucketExpiresWhenFull(t *testing.T) {
	eachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		f := newFixture(t, rdb, algorithmNamed("token_bucket"), bucketRate)
		c := f.mustAllow("s", 2)
		if c.d.Reset != 2*us(tokenUS) {
			t.Fatalf("reset %v after taking 2 from a new bucket, want %v", c.d.Reset, 2*us(tokenUS))
		}
		pttl := rdb.PTTL(t.Context(), f.key("s")).Val()
		elapsed := us(f.now("s") - c.b)
		within(t, "pttl", pttl, c.d.Reset-elapsed-time.Millisecond, c.d.Reset+2*time.Millisecond)
	})
}
