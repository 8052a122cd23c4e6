package ratelimit_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/ratelimit"
)

// 10 per 400ms.
var windowRate = ratelimit.Rate{Limit: 10, Period: 400 * time.Millisecond}

const (
	windowLimit = 10
	windowUS    = 400_000
)

// startOfWindow waits for the next fixed window to begin and returns its
// number, leaving most of it ahead.
func startOfWindow(f *fixture, s string) int64 {
	k := f.now(s)/windowUS + 1
	f.waitUntil(s, k*windowUS)
	return k
}

// At e µs into a window, a request is judged by prev·(w-e)/w + cur: the
// previous window's count fades out as the window moves on.
func TestSlidingWindowWeighsThePreviousWindow(t *testing.T) {
	eachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		f := newFixture(t, rdb, algorithmNamed("sliding_window"), windowRate)
		conclusive(t, func(s string) bool {
			k := startOfWindow(f, s)
			f.mustAllow(s, windowLimit)
			over := f.allow(s, 1)
			if over.a >= (k+1)*windowUS {
				return false
			}
			if over.d.Allowed {
				t.Fatalf("an 11th request in one fixed window was allowed")
			}
			// Full now, so the wait runs into the next window, until this
			// one's 10 weigh at most 9: w/10 into it.
			next := (k + 1) * windowUS
			within(t, "retry after", over.d.RetryAfter, us(next-over.a+windowUS/10), us(next-over.b+windowUS/10))

			// Through the next window, each request is judged by
			// 10·(w-e)/w + c, c being what that window has admitted so far.
			f.waitUntil(s, next)
			const prev = windowLimit
			c := 0
			var allowed, refused bool
			for {
				x := f.allow(s, 1)
				if x.a >= next+windowUS {
					break
				}
				eLo, eHi := x.b-next, x.a-next
				// Scaled by w, like the script: the room left after this request.
				room := func(e int64) int64 { return windowLimit*windowUS - prev*(windowUS-e) - int64(c+1)*windowUS }
				if x.d.Allowed {
					if room(eHi) < 0 {
						t.Fatalf("allowed at %v into the window with %d admitted: the weighted count was over the limit", us(eHi), c)
					}
					if lo, hi := int(max(0, room(eLo))/windowUS), int(room(eHi)/windowUS); x.d.Remaining < lo || x.d.Remaining > hi {
						t.Fatalf("remaining %d at %v..%v into the window, want within [%d, %d]", x.d.Remaining, us(eLo), us(eHi), lo, hi)
					}
					c++
					allowed = true
					continue
				}
				if room(eLo) >= 0 {
					t.Fatalf("refused at %v into the window with %d admitted: the weighted count left room", us(eLo), c)
				}
				// Retry once prev weighs little enough: prev·(w-e') ≤ (limit-c-1)·w.
				at := windowUS - int64(windowLimit-c-1)*windowUS/prev
				within(t, "retry after", x.d.RetryAfter, us(at-eHi), us(at-eLo))
				refused = true
			}
			return allowed && refused
		})
	})
}

// The documented error bound holds in its worst case: the previous window's
// requests all at its very end, where the weighting assumes them spread. The
// sliding window then holds more than the limit, but never more than
// limit + f·prev.
func TestSlidingWindowStaysWithinItsErrorBound(t *testing.T) {
	eachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		f := newFixture(t, rdb, algorithmNamed("sliding_window"), windowRate)
		conclusive(t, func(s string) bool {
			end := f.lastTenth(s, windowUS)
			var adms []admission
			for range windowLimit {
				x := f.mustAllow(s, 1)
				adms = append(adms, admission{b: x.b, a: x.a, n: 1})
			}
			if _, last := span(adms); last >= end {
				return false
			}
			// Then the whole next window, flat out.
			for {
				x := f.allow(s, 1)
				if x.b >= end+windowUS {
					break
				}
				if x.d.Allowed {
					adms = append(adms, admission{b: x.b, a: x.a, n: 1})
				}
			}
			largest := checkSlidingWindow(t, windowRate, adms)
			t.Logf("largest count in a sliding window: %d, limit %d", largest, windowLimit)
			// Only a run that went over the limit tested the bound.
			return largest > windowLimit
		})
	})
}
