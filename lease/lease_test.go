package lease_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/internal/store"
	"github.com/leasehold/leasehold/internal/store/keys"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/lease"
)

func TestMain(m *testing.M) {
	testenv.Main(m, map[string]func() int{
		"hold":   helperHold,
		"stress": helperStress,
		"wait":   helperWait,
	})
}

// newClient returns a lease client with a prefix of the test's own.
func newClient(t testing.TB, rdb redis.UniversalClient) (*lease.Client, keys.Space) {
	t.Helper()
	prefix := testenv.Prefix(t)
	c, err := lease.New(store.New(rdb, store.Config{Prefix: prefix}), lease.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return c, keys.New(prefix)
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

func mustAcquire(t testing.TB, c *lease.Client, key, holder string, limit int, ttl time.Duration) lease.Lease {
	t.Helper()
	l, err := c.Acquire(t.Context(), key, holder, limit, ttl)
	if err != nil {
		t.Fatalf("acquire %s: %v", holder, err)
	}
	return l
}

func mustBeFull(t testing.TB, c *lease.Client, key, holder string, limit int, ttl time.Duration) {
	t.Helper()
	_, err := c.Acquire(t.Context(), key, holder, limit, ttl)
	var full *lease.FullError
	if !errors.As(err, &full) || !errors.Is(err, lease.ErrFull) {
		t.Fatalf("acquire %s: got %v, want a *FullError", holder, err)
	}
	// Expiries are rounded up to the next millisecond.
	if full.RetryAfter <= 0 || full.RetryAfter > ttl+time.Millisecond {
		t.Fatalf("retry after %v, want within (0, %v]", full.RetryAfter, ttl+time.Millisecond)
	}
}

func inUse(t testing.TB, c *lease.Client, key string) int {
	t.Helper()
	n, err := c.InUse(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestAcquireRespectsLimit(t *testing.T) {
	eachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		c, _ := newClient(t, rdb)
		var last fencing.Token
		for i := range 3 {
			l := mustAcquire(t, c, "model:gpt", fmt.Sprint("h", i), 3, time.Minute)
			if l.Token <= last {
				t.Fatalf("token %d after %d: tokens must grow", l.Token, last)
			}
			last = l.Token
		}
		mustBeFull(t, c, "model:gpt", "h3", 3, time.Minute)
		if n := inUse(t, c, "model:gpt"); n != 3 {
			t.Fatalf("in use %d, want 3", n)
		}
	})
}

// Test 2: an acquire retried by the same holder after a lost reply takes
// one slot, not two.
func TestAcquireRetriedBySameHolderTakesOneSlot(t *testing.T) {
	eachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		c, _ := newClient(t, rdb)
		first := mustAcquire(t, c, "k", "a", 2, time.Minute)
		retry := mustAcquire(t, c, "k", "a", 2, time.Minute)
		if retry.Token <= first.Token {
			t.Fatalf("retry token %d not above %d", retry.Token, first.Token)
		}
		if n := inUse(t, c, "k"); n != 1 {
			t.Fatalf("in use %d after a retried acquire, want 1", n)
		}
		mustAcquire(t, c, "k", "b", 2, time.Minute)
		mustBeFull(t, c, "k", "c", 2, time.Minute)
	})
}

// Test 3: releasing twice never oversells.
func TestDoubleReleaseDoesNotOversell(t *testing.T) {
	eachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		c, _ := newClient(t, rdb)
		a := mustAcquire(t, c, "k", "a", 1, time.Minute)
		for range 2 {
			if err := c.Release(t.Context(), a); err != nil {
				t.Fatal(err)
			}
		}
		mustAcquire(t, c, "k", "b", 1, time.Minute)
		mustBeFull(t, c, "k", "c", 1, time.Minute)
	})
}

// waitExpired waits until, on the Redis clock, holder's lease on key has
// expired — without reaping it.
func waitExpired(t testing.TB, rdb redis.UniversalClient, ks keys.Space, key, holder string) {
	t.Helper()
	set := ks.LeaseSet(key)
	score, err := rdb.ZScore(t.Context(), set, holder).Result()
	if errors.Is(err, redis.Nil) {
		// Expired already, and the set with it (it lives as long as its
		// latest lease): a loaded machine stalled past the TTL.
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, func() bool {
		// TIME on the node that holds the set, where the scripts read it.
		now, err := rdb.Eval(t.Context(), "local t = redis.call('TIME') return t[1] * 1000 + math.floor(t[2] / 1000)", []string{set}).Int64()
		return err == nil && float64(now) > score
	}, "lease of %s never expired", holder)
}

// Test 4: a release that comes after the lease was reaped does not free the
// new holder's slot. A live holder keeps the set from expiring as a whole,
// so only reaping frees a's slot.
func TestLateReleaseAfterReapKeepsNewHolder(t *testing.T) {
	eachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		c, ks := newClient(t, rdb)
		mustAcquire(t, c, "k", "live", 2, time.Hour)
		a := mustAcquire(t, c, "k", "a", 2, 50*time.Millisecond)
		waitExpired(t, rdb, ks, "k", "a")
		mustAcquire(t, c, "k", "b", 2, time.Minute) // reaps a
		if err := c.Release(t.Context(), a); err != nil {
			t.Fatal(err)
		}
		if n := inUse(t, c, "k"); n != 2 {
			t.Fatalf("in use %d after a's late release, want 2 (live and b)", n)
		}
		mustBeFull(t, c, "k", "c", 2, time.Minute)
	})
}

// Test 5: a renew after the lease was reaped fails and does not bring it back;
// so does a renew after expiry that no acquire has reaped yet.
func TestRenewAfterReapIsLost(t *testing.T) {
	eachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		c, ks := newClient(t, rdb)
		a := mustAcquire(t, c, "k", "a", 1, 50*time.Millisecond)
		waitExpired(t, rdb, ks, "k", "a")
		mustAcquire(t, c, "k", "b", 1, time.Minute)
		if _, err := c.Renew(t.Context(), a); !errors.Is(err, lease.ErrLost) {
			t.Fatalf("renew after reap: %v, want ErrLost", err)
		}
		if err := rdb.ZScore(t.Context(), ks.LeaseSet("k"), "a").Err(); !errors.Is(err, redis.Nil) {
			t.Fatalf("a is back in the lease set (err %v)", err)
		}

		x := mustAcquire(t, c, "k2", "x", 1, 50*time.Millisecond)
		waitExpired(t, rdb, ks, "k2", "x")
		if _, err := c.Renew(t.Context(), x); !errors.Is(err, lease.ErrLost) {
			t.Fatalf("renew after expiry: %v, want ErrLost", err)
		}
		if n := inUse(t, c, "k2"); n != 0 {
			t.Fatalf("in use %d after an expired renew, want 0", n)
		}
	})
}

func TestRenewExtendsLease(t *testing.T) {
	eachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		c, ks := newClient(t, rdb)
		a := mustAcquire(t, c, "k", "a", 1, 300*time.Millisecond)
		before := rdb.ZScore(t.Context(), ks.LeaseSet("k"), "a").Val()
		renewed, err := c.Renew(t.Context(), a)
		if err != nil {
			t.Fatal(err)
		}
		if after := rdb.ZScore(t.Context(), ks.LeaseSet("k"), "a").Val(); after < before {
			t.Fatalf("expiry went back from %v to %v", before, after)
		}
		if renewed.TrustedUntil.Before(a.TrustedUntil) {
			t.Fatal("trust window shrank on renew")
		}
	})
}

// The lease set is a key with a TTL of its own, so that an abandoned one
// vanishes; it must never vanish before its latest lease expires, or a new
// holder finds an empty set while the last one still trusts its lease.
// Acquire, renew and a semaphore's grant are checked, each a few times (the
// old PEXPIRE of ttl fell short by up to 2 ms).
func TestLeaseSetOutlivesItsLatestLease(t *testing.T) {
	eachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		c, ks := newClient(t, rdb)
		set := ks.LeaseSet("k")
		check := func(what, holder string) {
			t.Helper()
			score := rdb.ZScore(t.Context(), set, holder).Val()
			end, err := rdb.PExpireTime(t.Context(), set).Result()
			if err != nil {
				t.Fatal(err)
			}
			if float64(end.Milliseconds()) < score {
				t.Fatalf("after %s: the set expires at %d ms, before its lease %s at %.0f ms", what, end.Milliseconds(), holder, score)
			}
		}
		for i := range 5 {
			h := fmt.Sprint("h", i)
			l := mustAcquire(t, c, "k", h, 5, 300*time.Millisecond)
			check("acquire", h)
			if _, err := c.Renew(t.Context(), l); err != nil {
				t.Fatal(err)
			}
			check("renew", h)
		}
		p, err := c.Semaphore("k", 6, 300*time.Millisecond).Wait(t.Context(), "waiter", lease.WaitConfig{})
		if err != nil {
			t.Fatal(err)
		}
		check("a semaphore's grant", "waiter")
		if err := p.Release(); err != nil {
			t.Fatal(err)
		}
	})
}

// Test 9: expiry and reaping run on Redis TIME, so a holder whose clock is
// an hour off in either direction changes nothing.
func TestSkewedClientClockStillReapsCorrectly(t *testing.T) {
	for _, skew := range []time.Duration{time.Hour, -time.Hour} {
		t.Run(skew.String(), func(t *testing.T) {
			eachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
				prefix := testenv.Prefix(t)
				skewed, err := lease.New(store.New(rdb, store.Config{Prefix: prefix}), lease.Config{Clock: func() time.Time { return time.Now().Add(skew) }})
				if err != nil {
					t.Fatal(err)
				}
				honest, err := lease.New(store.New(rdb, store.Config{Prefix: prefix}), lease.Config{})
				if err != nil {
					t.Fatal(err)
				}
				const ttl = 400 * time.Millisecond
				mustAcquire(t, skewed, "k", "skewed", 1, ttl)
				mustBeFull(t, honest, "k", "other", 1, ttl) // not reaped early
				start := time.Now()
				testenv.Eventually(t, 5*time.Second, func() bool {
					_, err := honest.Acquire(t.Context(), "k", "other", 1, ttl)
					return err == nil
				}, "the skewed holder's lease was never reaped")
				if waited := time.Since(start); waited > ttl+time.Second {
					t.Fatalf("reaped after %v, want about %v", waited, ttl)
				}
			})
		})
	}
}

// Test 7 (the lease side): tokens strictly increase across 10k concurrent
// acquisitions.
func TestTokensStrictlyIncreaseUnderConcurrency(t *testing.T) {
	eachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		c, _ := newClient(t, rdb)
		const workers, each = 50, 200
		var mu sync.Mutex
		var all []fencing.Token
		var wg sync.WaitGroup
		for w := range workers {
			wg.Go(func() {
				var mine []fencing.Token
				for i := range each {
					l, err := c.Acquire(t.Context(), "k", fmt.Sprintf("w%d-%d", w, i), workers*each, time.Minute)
					if err != nil {
						t.Error(err)
						return
					}
					if len(mine) > 0 && l.Token <= mine[len(mine)-1] {
						t.Errorf("worker %d: token %d after %d", w, l.Token, mine[len(mine)-1])
					}
					mine = append(mine, l.Token)
				}
				mu.Lock()
				all = append(all, mine...)
				mu.Unlock()
			})
		}
		wg.Wait()
		sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
		for i := 1; i < len(all); i++ {
			if all[i] == all[i-1] {
				t.Fatalf("token %d issued twice", all[i])
			}
		}
		if len(all) != workers*each {
			t.Fatalf("%d tokens, want %d", len(all), workers*each)
		}
	})
}

// A Redis that lost a key's fence counter (a restart without its AOF tail,
// a failover to a replica that missed the last increments) still issues
// tokens above every one issued before: the counter is floored by the
// Redis clock. Deleting the counter is the worst such loss. Each path that
// issues tokens is checked: Acquire (and a claim's AcquireAll, the same
// script) and a Wait's grant.
func TestTokensGrowAfterTheCounterIsLost(t *testing.T) {
	eachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		c, ks := newClient(t, rdb)
		lose := func() {
			t.Helper()
			if err := rdb.Del(t.Context(), ks.LeaseFence("k")).Err(); err != nil {
				t.Fatal(err)
			}
		}
		const exact = fencing.Token(1) << 53 // JSON clients read tokens as float64
		last := fencing.Token(0)
		grew := func(path string, token fencing.Token) {
			t.Helper()
			if token <= last || token >= exact {
				t.Fatalf("%s after the counter was lost: token %d, want above %d and below 2^53", path, token, last)
			}
			last = token
		}
		for i := range 3 {
			l := mustAcquire(t, c, "k", fmt.Sprint("a", i), 10, time.Minute)
			grew("acquire", l.Token)
			lose()
			p, err := c.Semaphore("k", 10, time.Minute).Wait(t.Context(), fmt.Sprint("w", i), lease.WaitConfig{})
			if err != nil {
				t.Fatal(err)
			}
			grew("wait", p.Token())
			if err := p.Release(); err != nil {
				t.Fatal(err)
			}
			lose()
		}
	})
}

// A counter ahead of the Redis clock (tokens issued by a primary whose
// clock ran ahead of this one's) still floors the tokens: each is above it,
// each above the one before, and the counter keeps its TTL. fence_take
// writes the clock's tokens first and reads the counter as it was, so this
// is the path of its second write.
//
// Fails when fence_take returns the clock's tokens without the counter's
// floor, or its second write drops the TTL.
func TestTokensStayAboveACounterAheadOfTheClock(t *testing.T) {
	eachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		c, ks := newClient(t, rdb)
		ahead := fencing.Token(time.Now().Add(time.Hour).UnixMicro())
		if err := rdb.Set(t.Context(), ks.LeaseFence("k"), int64(ahead), 0).Err(); err != nil {
			t.Fatal(err)
		}
		last := ahead
		for i := range 3 {
			l := mustAcquire(t, c, "k", fmt.Sprint("a", i), 10, time.Minute)
			if l.Token <= last {
				t.Fatalf("acquire %d: token %d, want above %d", i, l.Token, last)
			}
			last = l.Token
		}
		if ttl := rdb.PTTL(t.Context(), ks.LeaseFence("k")).Val(); ttl <= 0 {
			t.Fatalf("the counter's TTL is %v after the acquires, want one", ttl)
		}
	})
}

func TestBadInputIsRefusedAndWritesNothing(t *testing.T) {
	t.Parallel()
	rdb := testenv.Redis(t).Client(t)
	c, ks := newClient(t, rdb)
	long := string(make([]byte, 300))
	cases := []struct {
		name, key, holder string
		limit             int
		ttl               time.Duration
	}{
		{"empty key", "", "h", 1, time.Second},
		{"brace in key", "a}b", "h", 1, time.Second},
		{"long key", long, "h", 1, time.Second},
		{"empty holder", "k", "", 1, time.Second},
		{"long holder", "k", long, 1, time.Second},
		{"zero limit", "k", "h", 0, time.Second},
		{"negative limit", "k", "h", -3, time.Second},
		{"zero ttl", "k", "h", 1, 0},
		{"negative ttl", "k", "h", 1, -time.Second},
	}
	for _, tc := range cases {
		if _, err := c.Acquire(t.Context(), tc.key, tc.holder, tc.limit, tc.ttl); err == nil {
			t.Errorf("%s: acquire succeeded", tc.name)
		}
	}
	if _, err := c.Renew(t.Context(), lease.Lease{Key: "k", Holder: "h"}); err == nil || errors.Is(err, lease.ErrLost) {
		t.Errorf("renew with zero ttl: %v, want a validation error", err)
	}
	if n, err := rdb.Keys(t.Context(), ks.Prefix()+"*").Result(); err != nil || len(n) != 0 {
		t.Fatalf("bad input wrote keys %v (err %v)", n, err)
	}
}

func TestKeeperFencesHolderWhenLeaseIsReaped(t *testing.T) {
	t.Parallel()
	rdb := testenv.Redis(t).Client(t)
	c, ks := newClient(t, rdb)
	l := mustAcquire(t, c, "k", "a", 1, 300*time.Millisecond)
	ctx, stop := context.WithCancelCause(t.Context())
	defer stop(nil)
	keeper := c.Keeper(l, 20*time.Millisecond, stop)
	done := make(chan error, 1)
	go func() { done <- keeper.Run(ctx) }()

	testenv.Eventually(t, 5*time.Second, func() bool {
		return keeper.Lease().TrustedUntil.After(l.TrustedUntil.Add(2 * l.TTL))
	}, "renewals did not carry the lease past its TTL")
	if err := context.Cause(ctx); err != nil {
		t.Fatalf("holder cancelled while renewing: %v", err)
	}
	rdb.ZRem(t.Context(), ks.LeaseSet("k"), "a") // an operator, or a reaper, took it
	select {
	case err := <-done:
		if !errors.Is(err, lease.ErrLost) || !errors.Is(context.Cause(ctx), lease.ErrLost) {
			t.Fatalf("keeper returned %v, cause %v; want ErrLost", err, context.Cause(ctx))
		}
	case <-time.After(5 * time.Second):
		t.Fatal("keeper did not notice the lost lease")
	}
}

// Self-fencing: with Redis gone, the holder is cancelled by the end of its
// trust window, before Redis (if it were alive) would let anyone else in.
func TestKeeperSelfFencesWhenRedisIsUnreachable(t *testing.T) {
	t.Parallel()
	srv := testenv.StartRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1, DialTimeout: 50 * time.Millisecond})
	t.Cleanup(func() { rdb.Close() })
	c, _ := newClient(t, rdb)
	l := mustAcquire(t, c, "k", "a", 1, 500*time.Millisecond)
	ctx, stop := context.WithCancelCause(t.Context())
	defer stop(nil)
	keeper := c.Keeper(l, 50*time.Millisecond, stop)
	done := make(chan error, 1)
	go func() { done <- keeper.Run(ctx) }()

	srv.Kill(t)
	select {
	case err := <-done:
		if !errors.Is(err, lease.ErrLost) {
			t.Fatalf("keeper returned %v, want ErrLost", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("holder never self-fenced")
	}
	if late := time.Since(keeper.Lease().TrustedUntil); late > 250*time.Millisecond {
		t.Fatalf("holder fenced %v after its trust window ended", late)
	}
}

func TestSemaphoreBoundsConcurrentCallers(t *testing.T) {
	eachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		c, _ := newClient(t, rdb)
		sem := c.Semaphore("upstream", 2, time.Second)
		var mu sync.Mutex
		inFlight, maxInFlight, done := 0, 0, 0
		var wg sync.WaitGroup
		for g := range 10 {
			wg.Go(func() {
				for i := 0; i < 5; {
					err := sem.Do(t.Context(), fmt.Sprintf("g%d-%d", g, i), func(ctx context.Context, l lease.Lease) error {
						mu.Lock()
						inFlight++
						maxInFlight = max(maxInFlight, inFlight)
						mu.Unlock()
						time.Sleep(time.Millisecond) // the upstream call
						mu.Lock()
						inFlight--
						done++
						mu.Unlock()
						return nil
					})
					if errors.Is(err, lease.ErrFull) {
						continue
					}
					if err != nil {
						t.Error(err)
						return
					}
					i++
				}
			})
		}
		wg.Wait()
		if maxInFlight > 2 {
			t.Fatalf("%d callers ran at once, limit 2", maxInFlight)
		}
		if done != 50 {
			t.Fatalf("%d calls done, want 50", done)
		}
		if n, _ := sem.InUse(t.Context()); n != 0 {
			t.Fatalf("%d slots still held after every call returned", n)
		}
	})
}

// One key's ask failing (its lease set of the wrong type; on a Cluster,
// its shard down) fails that ask alone: AcquireEach answers the others.
func TestAcquireEachAnswersEveryAskOnItsOwn(t *testing.T) {
	eachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		c, ks := newClient(t, rdb)
		if err := rdb.Set(t.Context(), ks.LeaseSet("broken"), "not a lease set", 0).Err(); err != nil {
			t.Fatal(err)
		}
		asks := []lease.Ask{
			{Key: "whole", Limit: 1, Holders: []string{"a", "b"}},
			{Key: "broken", Limit: 5, Holders: []string{"c"}},
		}
		grants, errs := c.AcquireEach(t.Context(), time.Minute, time.Second, asks)
		if errs[0] != nil || grants[0].Tokens[0] == 0 || grants[0].Tokens[1] != 0 {
			t.Fatalf("whole: grant %+v, err %v; want a's slot granted, b's refused", grants[0], errs[0])
		}
		if errs[1] == nil || grants[1].Tokens != nil {
			t.Fatalf("broken: grant %+v, err %v; want the zero grant and WRONGTYPE", grants[1], errs[1])
		}
		if _, err := c.AcquireAll(t.Context(), time.Minute, time.Second, asks); err == nil {
			t.Fatal("AcquireAll returned no error for an ask that failed")
		}
	})
}
