package ratelimit_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/ratelimit"
)

// 5 per 400ms.
var fixedRate = ratelimit.Rate{Limit: 5, Period: 400 * time.Millisecond}

const (
	fixedLimit = 5
	fixedUS    = 400_000
	fuzzUS     = 2_000 // how long a counter may outlive its window
)

// A window admits its limit and no more, and the count starts over when
// the next window begins, at the time Reset and RetryAfter said.
func TestFixedWindowEdges(t *testing.T) {
	eachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		f := newFixture(t, rdb, algorithmNamed("fixed_window"), fixedRate)
		conclusive(t, func(s string) bool {
			k := f.now(s)/fixedUS + 1
			f.waitUntil(s, k*fixedUS+fuzzUS)
			f.mustAllow(s, 1)
			for i := 1; i < fixedLimit; i++ {
				if c := f.mustAllow(s, 1); c.d.Remaining != fixedLimit-1-i {
					t.Fatalf("remaining %d after %d, want %d", c.d.Remaining, i+1, fixedLimit-1-i)
				}
			}
			over := f.allow(s, 1)
			end := (k + 1) * fixedUS
			if over.a >= end {
				return false
			}
			if over.d.Allowed {
				t.Fatalf("a 6th request in one window was allowed")
			}
			// Both say: at the window's end, plus the counter's 2 ms of slack.
			within(t, "retry after", over.d.RetryAfter, us(end-over.a+fuzzUS), us(end-over.b+fuzzUS))
			if over.d.Reset != over.d.RetryAfter {
				t.Fatalf("reset %v, retry after %v: want them equal", over.d.Reset, over.d.RetryAfter)
			}

			f.waitUntil(s, over.a+over.d.RetryAfter.Microseconds())
			if c := f.mustAllow(s, 1); c.d.Remaining != fixedLimit-1 {
				t.Fatalf("remaining %d in a new window, want %d", c.d.Remaining, fixedLimit-1)
			}
			return true
		})
	})
}

// The fixed window's nature: its limit at the end of one window and its
// limit again at the start of the next, twice the limit within a span much
// shorter than one window. Expected, and documented.
func TestFixedWindowBoundaryBurst(t *testing.T) {
	// A long window: the burst must fit in its last tenth even on a busy
	// machine.
	rate := ratelimit.Rate{Limit: fixedLimit, Period: 2 * time.Second}
	const periodUS = 2_000_000
	eachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		f := newFixture(t, rdb, algorithmNamed("fixed_window"), rate)
		conclusive(t, func(s string) bool {
			end := f.lastTenth(s, periodUS)
			var burst []call
			for range fixedLimit {
				burst = append(burst, f.mustAllow(s, 1))
			}
			if burst[fixedLimit-1].a >= end {
				return false // not all of them in the old window
			}
			f.waitUntil(s, end+fuzzUS)
			for range fixedLimit {
				burst = append(burst, f.mustAllow(s, 1))
			}
			if x := f.allow(s, 1); x.a >= end+periodUS {
				return false
			} else if x.d.Allowed {
				t.Fatalf("the new window allowed more than its limit")
			}
			span := us(burst[len(burst)-1].a - burst[0].b)
			if span >= rate.Period/2 {
				return false
			}
			t.Logf("%d admitted within %v across a window boundary (limit %d per %v)", len(burst), span, fixedLimit, rate.Period)
			return true
		})
	})
}

// A counter left without expiry, as a crash between INCR and PEXPIRE in a
// non-atomic writer leaves it, gets its expiry back at the next request: its
// subject is limited until the window ends, not forever.
func TestFixedWindowRepairsLostExpiry(t *testing.T) {
	eachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		f := newFixture(t, rdb, algorithmNamed("fixed_window"), fixedRate)
		key := f.key("s")
		if err := rdb.Set(t.Context(), key, fixedLimit, 0).Err(); err != nil {
			t.Fatal(err)
		}
		stuck := f.allow("s", 1)
		if stuck.d.Allowed {
			t.Fatalf("allowed with the counter at the limit")
		}
		// The expiry is the window's end, which may be a millisecond away:
		// a counter already gone (-2) expired, so it had one. Only -1 (no
		// expiry) or one past the window is wrong.
		pttl := rdb.PTTL(t.Context(), key).Val()
		if pttl == -1 || pttl > fixedRate.Period {
			t.Fatalf("pttl %v after a request on a counter without expiry, want gone or within (0, %v]", pttl, fixedRate.Period)
		}
		f.waitUntil("s", stuck.a+stuck.d.RetryAfter.Microseconds())
		f.mustAllow("s", 1)
	})
}
