package ratelimit_test

import (
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/ratelimit"
)

// 5 per 400ms.
var logRate = ratelimit.Rate{Limit: 5, Period: 400 * time.Millisecond}

const logWindowUS = 400_000

// The window is (now - w, now]: entries leave it one by one, w after they
// were admitted, and each frees exactly its own slot.
func TestSlidingLogWindowEdges(t *testing.T) {
	eachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		f := newFixture(t, rdb, algorithmNamed("sliding_log"), logRate)
		conclusive(t, func(s string) bool {
			first := f.mustAllow(s, 1)
			f.waitUntil(s, first.a+logWindowUS/2)
			var rest []call
			for range 4 {
				rest = append(rest, f.mustAllow(s, 1))
			}
			if rest[3].d.Remaining != 0 {
				t.Fatalf("remaining %d with 5 in the window, want 0", rest[3].d.Remaining)
			}

			full := f.allow(s, 1)
			if full.a >= first.b+logWindowUS {
				return false // the first entry may have left already
			}
			if full.d.Allowed {
				t.Fatalf("a 6th request in one window was allowed")
			}
			// Retry when the first entry leaves; reset when the newest does.
			within(t, "retry after", full.d.RetryAfter, us(first.b+logWindowUS-full.a), us(first.a+logWindowUS-full.b))
			within(t, "reset", full.d.Reset, us(rest[3].b+logWindowUS-full.a), us(rest[3].a+logWindowUS-full.b))

			f.waitUntil(s, full.a+full.d.RetryAfter.Microseconds())
			freed := f.mustAllow(s, 1)
			if freed.a >= rest[0].b+logWindowUS {
				return false
			}
			if freed.d.Remaining != 0 {
				t.Fatalf("remaining %d after the one freed slot was taken, want 0", freed.d.Remaining)
			}
			again := f.allow(s, 1)
			if again.a >= rest[0].b+logWindowUS {
				return false
			}
			if again.d.Allowed {
				t.Fatalf("the oldest entry leaving freed more than one slot")
			}
			return true
		})
	})
}

// A request of cost n waits until n entries' worth of room is free: here
// the 4th oldest entry must leave, not the 1st.
func TestSlidingLogCostWaitsForEnoughRoom(t *testing.T) {
	eachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		f := newFixture(t, rdb, algorithmNamed("sliding_log"), logRate)
		conclusive(t, func(s string) bool {
			early := f.mustAllow(s, 3)
			f.waitUntil(s, early.a+logWindowUS/4)
			late := f.mustAllow(s, 2)
			big := f.allow(s, 4)
			if big.a >= early.b+logWindowUS {
				return false
			}
			if big.d.Allowed {
				t.Fatalf("cost 4 allowed with 5 of 5 in the window")
			}
			// Room for 4 means 4 of the 5 entries gone: the 3 early ones and
			// one of the late ones.
			within(t, "retry after", big.d.RetryAfter, us(late.b+logWindowUS-big.a), us(late.a+logWindowUS-big.b))
			return true
		})
	})
}

// Requests in the same millisecond, or one call's n entries, are each an
// entry of their own: a timestamp alone as member would merge them.
func TestSlidingLogSameInstantRequestsAreEachCounted(t *testing.T) {
	eachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		f := newFixture(t, rdb, algorithmNamed("sliding_log"), ratelimit.Rate{Limit: 1000, Period: time.Minute})
		f.mustAllow("one-call", 5)
		if n := rdb.ZCard(t.Context(), f.key("one-call")).Val(); n != 5 {
			t.Fatalf("one call of cost 5 left %d entries, want 5", n)
		}

		var wg sync.WaitGroup
		for range 64 {
			wg.Go(func() {
				if _, err := f.l.Allow(t.Context(), "many", 1); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		entries := rdb.ZRangeWithScores(t.Context(), f.key("many"), 0, -1).Val()
		if len(entries) != 64 {
			t.Fatalf("64 concurrent requests left %d entries, want 64", len(entries))
		}
		ms := map[int64]int{}
		for _, e := range entries {
			ms[int64(e.Score)/1000]++
		}
		t.Logf("64 requests over %d distinct milliseconds", len(ms))
	})
}
