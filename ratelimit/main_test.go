package ratelimit_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/internal/store"
	"github.com/leasehold/leasehold/internal/store/keys"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/ratelimit"
)

func TestMain(m *testing.M) {
	testenv.Main(m, map[string]func() int{"hammer": helperHammer})
}

// algorithm is one of the four limiters, as the tests build it.
type algorithm struct {
	name string
	new  func(*store.Store, ratelimit.Config) (ratelimit.Limiter, error)
	// key is the Redis key the limiter keeps subject's state in.
	key func(ks keys.Space, subject string, r ratelimit.Rate) string
}

var algorithms = []algorithm{
	{
		name: "token_bucket",
		new: func(st *store.Store, cfg ratelimit.Config) (ratelimit.Limiter, error) {
			return ratelimit.NewTokenBucket(st, cfg)
		},
		key: func(ks keys.Space, subject string, _ ratelimit.Rate) string { return ks.RateBucket(subject) },
	},
	{
		name: "sliding_log",
		new: func(st *store.Store, cfg ratelimit.Config) (ratelimit.Limiter, error) {
			return ratelimit.NewSlidingLog(st, cfg)
		},
		key: func(ks keys.Space, subject string, r ratelimit.Rate) string { return ks.RateLog(subject, r.Period) },
	},
	{
		name: "sliding_window",
		new: func(st *store.Store, cfg ratelimit.Config) (ratelimit.Limiter, error) {
			return ratelimit.NewSlidingWindow(st, cfg)
		},
		key: func(ks keys.Space, subject string, r ratelimit.Rate) string { return ks.RateWindow(subject, r.Period) },
	},
	{
		name: "fixed_window",
		new: func(st *store.Store, cfg ratelimit.Config) (ratelimit.Limiter, error) {
			return ratelimit.NewFixedWindow(st, cfg)
		},
		key: func(ks keys.Space, subject string, r ratelimit.Rate) string { return ks.RateFixed(subject, r.Period) },
	},
}

func algorithmNamed(name string) algorithm {
	for _, a := range algorithms {
		if a.name == name {
			return a
		}
	}
	panic("no algorithm " + name)
}

// eachBackend runs test on a single Redis and on a Redis Cluster.
func eachBackend(t *testing.T, test func(t *testing.T, rdb redis.UniversalClient)) {
	t.Parallel()
	for _, b := range testenv.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			test(t, b.Client)
		})
	}
}

// fixture is one limiter under test with a prefix of its own, and the means
// to read the Redis clock next to its keys.
type fixture struct {
	t    testing.TB
	rdb  redis.UniversalClient
	ks   keys.Space
	alg  algorithm
	rate ratelimit.Rate
	l    ratelimit.Limiter
}

func newFixture(t testing.TB, rdb redis.UniversalClient, alg algorithm, r ratelimit.Rate) *fixture {
	t.Helper()
	prefix := testenv.Prefix(t)
	l, err := alg.new(store.New(rdb, store.Config{Prefix: prefix}), ratelimit.Config{Rate: r})
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{t: t, rdb: rdb, ks: keys.New(prefix), alg: alg, rate: r, l: l}
}

func (f *fixture) key(subject string) string { return f.alg.key(f.ks, subject, f.rate) }

// clockScript reads TIME in µs; run with a key, it reads the clock of the
// node that holds the key, which is the clock the limiter's script reads.
var clockScript = redis.NewScript(`local t = redis.call('TIME') return t[1] * 1000000 + t[2]`)

func redisNow(ctx context.Context, rdb redis.UniversalClient, key string) (int64, error) {
	return clockScript.Run(ctx, rdb, []string{key}).Int64()
}

// now is the Redis time, in µs, where subject's key lives.
func (f *fixture) now(subject string) int64 {
	f.t.Helper()
	us, err := redisNow(f.t.Context(), f.rdb, f.key(subject))
	if err != nil {
		f.t.Fatal(err)
	}
	return us
}

// waitUntil waits until the Redis clock next to subject's key reads at
// least us.
func (f *fixture) waitUntil(subject string, us int64) {
	f.t.Helper()
	testenv.Eventually(f.t, 10*time.Second, func() bool { return f.now(subject) >= us },
		"redis clock never reached %d", us)
}

// lastTenth waits for the last tenth of a window of w µs, with all of that
// tenth still ahead, and returns the window's end.
func (f *fixture) lastTenth(subject string, w int64) int64 {
	f.t.Helper()
	now := f.now(subject)
	end := (now/w + 1) * w
	if now > end-w/10 {
		end += w
	}
	f.waitUntil(subject, end-w/10)
	return end
}

// call is one Allow with the Redis time read just before and just after it:
// the script read its own time somewhere in [b, a].
type call struct {
	d    ratelimit.Decision
	b, a int64
	n    int
}

func (f *fixture) allow(subject string, n int) call {
	f.t.Helper()
	b := f.now(subject)
	d, err := f.l.Allow(f.t.Context(), subject, n)
	if err != nil {
		f.t.Fatalf("allow %s n=%d: %v", subject, n, err)
	}
	return call{d: d, b: b, a: f.now(subject), n: n}
}

func (f *fixture) mustAllow(subject string, n int) call {
	f.t.Helper()
	c := f.allow(subject, n)
	if !c.d.Allowed {
		f.t.Fatalf("allow %s n=%d refused: %+v", subject, n, c.d)
	}
	return c
}

// conclusive runs try on fresh subjects until one run proves something. try
// returns false when the machine was too slow for its timing to show what
// it set out to (a step meant to land inside a window landed outside); a
// wrong answer from the limiter fails the test at once.
func conclusive(t *testing.T, try func(subject string) bool) {
	t.Helper()
	for i := range 10 {
		if try(fmt.Sprint("subject-", i)) {
			return
		}
		t.Logf("attempt %d too slow to be conclusive, trying again", i)
	}
	t.Fatal("10 attempts too slow to be conclusive")
}

// us turns µs into a Duration.
func us(v int64) time.Duration { return time.Duration(v) * time.Microsecond }

// within fails t unless lo ≤ got ≤ hi.
func within(t testing.TB, what string, got, lo, hi time.Duration) {
	t.Helper()
	if got < lo || got > hi {
		t.Fatalf("%s = %v, want within [%v, %v]", what, got, lo, hi)
	}
}
