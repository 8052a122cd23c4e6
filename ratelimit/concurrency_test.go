package ratelimit_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/internal/store"
	"github.com/leasehold/leasehold/internal/store/keys"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/ratelimit"
)

// The concurrency tests run each limiter flat out for runUS of Redis time,
// a few of its windows, and check every window of what it admitted.
const runUS = 700_000

// concurrencyRate is 20 per 300ms; the bucket holds 10.
func concurrencyRate(alg algorithm) ratelimit.Rate {
	r := ratelimit.Rate{Limit: 20, Period: 300 * time.Millisecond}
	if alg.name == "token_bucket" {
		r.Burst = 10
	}
	return r
}

// admission is one admitted request of cost n: the script read its time
// somewhere in [b, a], Redis µs.
type admission struct {
	b, a int64
	n    int
}

// hammer calls Allow(subject, 1) from workers goroutines until the Redis
// clock next to key reads until, and returns what was admitted.
func hammer(ctx context.Context, l ratelimit.Limiter, rdb redis.UniversalClient, key, subject string, workers int, until int64) ([]admission, error) {
	ctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	var (
		mu   sync.Mutex
		adms []admission
		wg   sync.WaitGroup
	)
	for range workers {
		wg.Go(func() {
			for ctx.Err() == nil {
				b, err := redisNow(ctx, rdb, key)
				if err != nil {
					stop(err)
					return
				}
				if b >= until {
					return
				}
				d, err := l.Allow(ctx, subject, 1)
				if err != nil {
					stop(err)
					return
				}
				if !d.Allowed {
					continue
				}
				a, err := redisNow(ctx, rdb, key)
				if err != nil {
					stop(err)
					return
				}
				mu.Lock()
				adms = append(adms, admission{b: b, a: a, n: 1})
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return adms, context.Cause(ctx)
}

// sure sums the cost of the admissions certainly decided within [from, to]:
// those whose whole bracket lies inside. It is a lower bound of the true
// count, so a check against it fails only when the limiter was wrong.
func sure(adms []admission, from, to int64) int {
	n := 0
	for _, x := range adms {
		if x.b >= from && x.a <= to {
			n += x.n
		}
	}
	return n
}

// span is the earliest and the latest time in adms.
func span(adms []admission) (first, last int64) {
	first, last = adms[0].b, adms[0].a
	for _, x := range adms {
		first, last = min(first, x.b), max(last, x.a)
	}
	return first, last
}

// checkDefinition fails t if adms break the definition of alg at rate r
// (see the package doc) in any window.
func checkDefinition(t testing.TB, alg algorithm, r ratelimit.Rate, adms []admission) {
	t.Helper()
	w := r.Period.Microseconds()
	switch alg.name {
	case "token_bucket":
		// Over any span [s, e]: at most Burst + Limit·(e-s)/Period.
		for _, first := range adms {
			for _, last := range adms {
				s, e := first.b, last.a
				if e < s {
					continue
				}
				if n, most := sure(adms, s, e), float64(r.Burst)+float64(r.Limit)*float64(e-s)/float64(w); float64(n) > most {
					t.Fatalf("%d admitted within %v, at most %.2f allowed", n, us(e-s), most)
				}
			}
		}
	case "sliding_log":
		// In any window (s, s+w]: at most Limit.
		for _, first := range adms {
			if n := sure(adms, first.b, first.b+w-1); n > r.Limit {
				t.Fatalf("%d admitted within one window from %d, limit %d", n, first.b, r.Limit)
			}
		}
	case "fixed_window":
		// In each window [k·w, (k+1)·w): at most Limit, leaving out the 2 ms
		// at its start that the previous window's counter may still count.
		first, last := span(adms)
		for k := first / w; k <= last/w; k++ {
			if n := sure(adms, k*w+2000, (k+1)*w-1); n > r.Limit {
				t.Fatalf("%d admitted in fixed window %d, limit %d", n, k, r.Limit)
			}
		}
	case "sliding_window":
		checkSlidingWindow(t, r, adms)
	default:
		t.Fatalf("no definition for %s", alg.name)
	}
}

// checkSlidingWindow checks the sliding window counter's documented bound:
// at most Limit in each fixed window, and at most Limit + f·prev in any
// sliding window (t-w, t], where f is how far t is into its fixed window
// and prev the previous fixed window's count. It returns the largest count
// seen in a sliding window.
func checkSlidingWindow(t testing.TB, r ratelimit.Rate, adms []admission) int {
	t.Helper()
	w := r.Period.Microseconds()
	first, last := span(adms)
	for k := first / w; k <= last/w; k++ {
		if n := sure(adms, k*w, (k+1)*w-1); n > r.Limit {
			t.Fatalf("%d admitted in fixed window %d, limit %d", n, k, r.Limit)
		}
	}
	largest := 0
	for _, last := range adms {
		end := last.a
		k := end / w
		prev := 0 // an upper bound: everything that may have been decided in window k-1
		for _, x := range adms {
			if x.b < k*w && x.a >= (k-1)*w {
				prev += x.n
			}
		}
		f := float64(end-k*w) / float64(w)
		n := sure(adms, end-w+1, end)
		if bound := float64(r.Limit) + f*float64(prev); float64(n) > bound {
			t.Fatalf("%d admitted in the sliding window ending %v into fixed window %d, bound %d + %.3f·%d = %.2f",
				n, us(end-k*w), k, r.Limit, f, prev, bound)
		}
		largest = max(largest, n)
	}
	return largest
}

// 64 goroutines on one subject never get more than the definition allows,
// in any window.
func TestConcurrentRequestsKeepTheDefinition(t *testing.T) {
	t.Parallel()
	for _, alg := range algorithms {
		t.Run(alg.name, func(t *testing.T) {
			eachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
				r := concurrencyRate(alg)
				f := newFixture(t, rdb, alg, r)
				adms, err := hammer(t.Context(), f.l, rdb, f.key("s"), "s", 64, f.now("s")+runUS)
				if err != nil {
					t.Fatal(err)
				}
				if len(adms) == 0 {
					t.Fatal("nothing admitted")
				}
				checkDefinition(t, alg, r, adms)
				t.Logf("%d admitted", len(adms))
			})
		})
	}
}

// Helper subprocess orders.
const (
	envAlg     = "RATELIMIT_TEST_ALG"
	envPrefix  = "RATELIMIT_TEST_PREFIX"
	envSubject = "RATELIMIT_TEST_SUBJECT"
	envStart   = "RATELIMIT_TEST_START" // a list to BLPOP the run's end time from
)

// helperHammer hammers one subject, like the test process does, from the
// moment the test pushes the run's end time, then prints what it admitted.
func helperHammer() int {
	ctx := context.Background()
	rdb := testenv.HelperRedis()
	defer rdb.Close()
	alg := algorithmNamed(os.Getenv(envAlg))
	r := concurrencyRate(alg)
	prefix, subject := os.Getenv(envPrefix), os.Getenv(envSubject)
	l, err := alg.new(store.New(rdb, store.Config{Prefix: prefix}), ratelimit.Config{Rate: r})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("ready")
	start, err := rdb.BLPop(ctx, 30*time.Second, os.Getenv(envStart)).Result()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	until, err := strconv.ParseInt(start[1], 10, 64)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	adms, err := hammer(ctx, l, rdb, alg.key(keys.New(prefix), subject, r), subject, 16, until)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	for _, x := range adms {
		fmt.Println("admitted", x.b, x.a, x.n)
	}
	fmt.Println("done")
	return 0
}

// Two processes sharing one limit admit no more together than the
// definition allows.
func TestTwoProcessesShareOneLimit(t *testing.T) {
	t.Parallel()
	for _, alg := range algorithms {
		t.Run(alg.name, func(t *testing.T) {
			t.Parallel()
			rdb := testenv.Redis(t).Client(t) // the helper's Redis
			r := concurrencyRate(alg)
			f := newFixture(t, rdb, alg, r)
			startList := testenv.Prefix(t) + "start"
			p := testenv.StartHelper(t, "hammer",
				envAlg+"="+alg.name, envPrefix+"="+f.ks.Prefix(), envSubject+"=s", envStart+"="+startList)
			p.Line(t, "ready", 30*time.Second)

			until := f.now("s") + runUS
			if err := rdb.RPush(t.Context(), startList, until).Err(); err != nil {
				t.Fatal(err)
			}
			own, err := hammer(t.Context(), f.l, rdb, f.key("s"), "s", 16, until)
			if err != nil {
				t.Fatal(err)
			}
			theirs := helperAdmissions(t, p)
			if len(own) == 0 || len(theirs) == 0 {
				t.Fatalf("admitted %d here and %d in the helper: both should have had some", len(own), len(theirs))
			}
			checkDefinition(t, alg, r, append(own, theirs...))
			t.Logf("%d admitted here, %d in the helper", len(own), len(theirs))
		})
	}
}

func helperAdmissions(t *testing.T, p *testenv.Process) []admission {
	t.Helper()
	var adms []admission
	deadline := time.After(30 * time.Second)
	for {
		select {
		case l, ok := <-p.Lines():
			if !ok {
				t.Fatal("helper exited before it was done")
			}
			if l == "done" {
				return adms
			}
			if rest, ok := strings.CutPrefix(l, "admitted "); ok {
				var x admission
				if _, err := fmt.Sscan(rest, &x.b, &x.a, &x.n); err != nil {
					t.Fatalf("helper line %q: %v", l, err)
				}
				adms = append(adms, x)
			}
		case <-deadline:
			t.Fatal("helper not done within 30s")
		}
	}
}
