package lease_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/internal/store"
	"github.com/leasehold/leasehold/internal/store/keys"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/job"
	"github.com/leasehold/leasehold/lease"
)

// ask asks for slots of key for holders under budget b, each estimated at
// tokens, and returns the holders granted.
func ask(t testing.TB, c *lease.Client, key string, limit int, b job.Budget, tokens int64, holders ...string) []string {
	t.Helper()
	a := lease.Ask{Key: key, Limit: limit, Holders: holders, Budget: b}
	for range holders {
		a.Tokens = append(a.Tokens, tokens)
	}
	g, err := c.AcquireAll(t.Context(), time.Minute, time.Second, []lease.Ask{a})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for i, tok := range g[0].Tokens {
		if tok != 0 {
			got = append(got, holders[i])
		}
	}
	return got
}

func settle(t testing.TB, c *lease.Client, key string, limit int, b job.Budget, ss ...lease.Settlement) {
	t.Helper()
	if _, err := c.Settle(t.Context(), key, limit, b, ss); err != nil {
		t.Fatal(err)
	}
}

func budgetState(t testing.TB, c *lease.Client, rdb redis.UniversalClient, key string) store.BudgetState {
	t.Helper()
	var r store.BudgetReading
	if _, err := rdb.Pipelined(t.Context(), func(p redis.Pipeliner) error {
		r = c.Data().BudgetIn(t.Context(), p, key)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	st, err := r.State()
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// age moves every entry of key's window a minute and a second into the
// past: the minute has rolled on.
func age(t testing.TB, rdb redis.UniversalClient, ks keys.Space, key string) {
	t.Helper()
	w := ks.LeaseWindow(key)
	entries, err := rdb.ZRangeWithScores(t.Context(), w, 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if err := rdb.ZAdd(t.Context(), w, redis.Z{Score: e.Score - 61_000, Member: e.Member}).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestBudgetRPMCountsStartsInTheRollingMinute(t *testing.T) {
	eachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		c, ks := newClient(t, rdb)
		b := job.Budget{RPM: 3}
		if got := ask(t, c, "model:r", -1, b, 0, "a", "b", "c", "d", "e"); len(got) != 3 {
			t.Fatalf("granted %v, want the first 3 of rpm 3", got)
		}
		settle(t, c, "model:r", -1, b, lease.Settlement{Holder: "a", Outcome: lease.OutcomeOK, Tokens: -1})
		// A finished request still counts: rpm limits starts, not requests in flight.
		if got := ask(t, c, "model:r", -1, b, 0, "f"); len(got) != 0 {
			t.Fatalf("granted %v after 3 starts this minute, want none", got)
		}
		if st := budgetState(t, c, rdb, "model:r"); st.Requests != 3 {
			t.Fatalf("requests of the last minute %d, want 3", st.Requests)
		}
		age(t, rdb, ks, "model:r")
		if got := ask(t, c, "model:r", -1, b, 0, "f", "g", "h", "i"); len(got) != 3 {
			t.Fatalf("granted %v once the minute rolled on, want 3", got)
		}
	})
}

func TestBudgetTPMReservesEstimatesAndSettlesActualUsage(t *testing.T) {
	eachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		c, _ := newClient(t, rdb)
		b := job.Budget{TPM: 1000}
		if got := ask(t, c, "model:t", -1, b, 400, "a", "b", "c"); len(got) != 2 {
			t.Fatalf("granted %v, want 2 estimates of 400 in tpm 1000", got)
		}
		// a spent 50 of its 400: the window holds 450, so c's 400 fits.
		settle(t, c, "model:t", -1, b, lease.Settlement{Holder: "a", Outcome: lease.OutcomeOK, Tokens: 50, Estimate: 400})
		if st := budgetState(t, c, rdb, "model:t"); st.Tokens != 450 {
			t.Fatalf("tokens of the last minute %d, want 450 (50 spent + 400 reserved)", st.Tokens)
		}
		if got := ask(t, c, "model:t", -1, b, 400, "c"); len(got) != 1 {
			t.Fatalf("granted %v with 450 of 1000 used, want c", got)
		}
		// A settlement sent again (its reply lost) settles once.
		settle(t, c, "model:t", -1, b, lease.Settlement{Holder: "a", Outcome: lease.OutcomeOK, Tokens: 50, Estimate: 400})
		if st := budgetState(t, c, rdb, "model:t"); st.Tokens != 850 {
			t.Fatalf("tokens %d after a repeated settlement, want 850", st.Tokens)
		}
		// A job larger than the whole budget runs alone, never beside others.
		if got := ask(t, c, "model:t", -1, b, 5000, "big"); len(got) != 0 {
			t.Fatalf("granted %v beside 850 tokens, want none", got)
		}
	})
}

// A reservation is clamped to [0, tpm] whatever estimate it is given, so
// a key's tokens stay an exact integer every HINCRBY can add to: a
// negative estimate reserves nothing, not room for more. Settlements of
// absurd numbers fail nothing either, and the tokens of the minute stay
// within [0, tpm].
func TestBudgetReservationsAreClampedToTheTPM(t *testing.T) {
	eachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		c, _ := newClient(t, rdb)
		b := job.Budget{TPM: 1000}
		inRange := func(when string) {
			t.Helper()
			if st := budgetState(t, c, rdb, "model:w"); st.Tokens < 0 || st.Tokens > b.TPM {
				t.Fatalf("%s: tokens of the last minute %d, want 0 to %d", when, st.Tokens, b.TPM)
			}
		}
		if got := ask(t, c, "model:w", -1, b, math.MinInt64, "neg"); len(got) != 1 {
			t.Fatalf("granted %v, want neg", got)
		}
		inRange("after a negative estimate")
		// The negative estimate reserved nothing, not room for more.
		if got := ask(t, c, "model:w", -1, b, 1000, "whole"); len(got) != 1 {
			t.Fatalf("granted %v, want whole", got)
		}
		inRange("after the whole tpm")
		if got := ask(t, c, "model:w", -1, b, 600, "more"); len(got) != 0 {
			t.Fatalf("granted %v beside the whole tpm reserved, want none", got)
		}
		settle(t, c, "model:w", -1, b,
			lease.Settlement{Holder: "neg", Outcome: lease.OutcomeOther, Tokens: -1, Estimate: math.MinInt64},
			lease.Settlement{Holder: "whole", Outcome: lease.OutcomeOther, Tokens: 10, Estimate: math.MaxInt64})
		inRange("after the settlements")
		if st := budgetState(t, c, rdb, "model:w"); st.Tokens != 10 {
			t.Fatalf("tokens of the last minute %d, want the 10 spent", st.Tokens)
		}
		// A job larger than the whole tpm waits for an empty window.
		if got := ask(t, c, "model:w", -1, b, math.MaxInt64, "huge"); len(got) != 0 {
			t.Fatalf("granted %v with 10 tokens used, want none", got)
		}
		inRange("after a huge estimate")
		// Tokens spent beyond any tpm count as the largest tpm.
		settle(t, c, "model:w", -1, b, lease.Settlement{Holder: "whole", Outcome: lease.OutcomeOK, Tokens: math.MaxInt64, Estimate: 1000})
		if st := budgetState(t, c, rdb, "model:w"); st.Tokens != job.MaxBudget {
			t.Fatalf("tokens of the last minute %d after a settlement of 2^63-1, want %d", st.Tokens, int64(job.MaxBudget))
		}
	})
}

// An execution that ran past its minute (its window entry forgotten)
// settles what it spent over what its claim reserved, and that was its
// estimate clamped to the tpm: a job estimated at 5000 of tpm 1000 that
// spent 1200 adds 200, not nothing.
func TestBudgetSettlesPastTheMinuteOverTheClampedReservation(t *testing.T) {
	eachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		c, ks := newClient(t, rdb)
		b := job.Budget{TPM: 1000}
		if got := ask(t, c, "model:p", -1, b, 5000, "big"); len(got) != 1 {
			t.Fatalf("granted %v, want big: a job larger than the tpm runs alone", got)
		}
		age(t, rdb, ks, "model:p")
		settle(t, c, "model:p", -1, b, lease.Settlement{Holder: "big", Outcome: lease.OutcomeOK, Tokens: 1200, Estimate: 5000})
		if st := budgetState(t, c, rdb, "model:p"); st.Tokens != 200 {
			t.Fatalf("tokens of the last minute %d, want the 200 spent over the 1000 reserved", st.Tokens)
		}
	})
}

func TestBudgetUnusedReservationLeavesTheWindow(t *testing.T) {
	eachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		c, _ := newClient(t, rdb)
		b := job.Budget{RPM: 1, TPM: 100}
		if got := ask(t, c, "model:u", 1, b, 100, "a"); len(got) != 1 {
			t.Fatalf("granted %v, want a", got)
		}
		settle(t, c, "model:u", 1, b, lease.Settlement{Holder: "a", Outcome: lease.OutcomeUnused, Tokens: -1, Estimate: 100})
		if st := budgetState(t, c, rdb, "model:u"); st.Requests != 0 || st.Tokens != 0 {
			t.Fatalf("after giving the slot back unused: %+v, want an empty window", st)
		}
		if n := inUse(t, c, "model:u"); n != 0 {
			t.Fatalf("in use %d after the settlement, want 0: it releases the slot", n)
		}
		if got := ask(t, c, "model:u", 1, b, 100, "b"); len(got) != 1 {
			t.Fatalf("granted %v, want b: the budget is whole again", got)
		}
	})
}

func TestPushbackCutsTheEffectiveLimitAndThrottlesTheKey(t *testing.T) {
	eachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		c, _ := newClient(t, rdb)
		b := job.Budget{Adaptive: true}
		// A key new to adapting starts low: an eighth of its limit of 20.
		if got := ask(t, c, "model:p", 20, b, 0, "a", "b", "c", "d"); len(got) != 2 {
			t.Fatalf("granted %v, want 2 (the slow start of limit 20)", got)
		}
		settle(t, c, "model:p", 20, b, lease.Settlement{Holder: "a", Outcome: lease.OutcomePushback, Tokens: -1, RetryAfter: time.Second})
		st := budgetState(t, c, rdb, "model:p")
		if st.Effective != 1 || st.ThrottledUntil.IsZero() {
			t.Fatalf("after a pushback with one other in flight: %+v, want effective 1 and throttled", st)
		}
		if got := ask(t, c, "model:p", 20, b, 0, "e"); len(got) != 0 {
			t.Fatalf("granted %v while throttled, want none", got)
		}
		settle(t, c, "model:p", 20, b, lease.Settlement{Holder: "b", Outcome: lease.OutcomeOK, Tokens: -1})
		testenv.Eventually(t, 5*time.Second, func() bool {
			return len(ask(t, c, "model:p", 20, b, 0, "e")) == 1
		}, "the key is still throttled a second after its Retry-After")
	})
}

func TestAdaptiveLimitGrowsBackNeverAboveTheLimit(t *testing.T) {
	eachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		c, _ := newClient(t, rdb)
		b := job.Budget{Adaptive: true}
		const limit = 6
		last := 0.0
		for round := range 40 {
			// Fill the limit in force (one more holder is refused: the limit
			// is in use), then every holder succeeds.
			var holders []string
			for i := range limit + 1 {
				holders = append(holders, fmt.Sprint("r", round, "-", i))
			}
			got := ask(t, c, "model:g", limit, b, 0, holders...)
			if len(got) == 0 || len(got) > limit {
				t.Fatalf("round %d: %d granted, want 1 to %d", round, len(got), limit)
			}
			var ss []lease.Settlement
			for _, h := range got {
				ss = append(ss, lease.Settlement{Holder: h, Outcome: lease.OutcomeOK, Tokens: -1})
			}
			settle(t, c, "model:g", limit, b, ss...)
			st := budgetState(t, c, rdb, "model:g")
			if st.Effective < last || st.Effective > limit {
				t.Fatalf("effective %v after %v: want it growing, at most %d", st.Effective, last, limit)
			}
			last = st.Effective
		}
		if last != limit {
			t.Fatalf("effective %v after 40 rounds of successes, want the limit %d", last, limit)
		}
	})
}

// TestBudgetsAreNeverExceededUnderConcurrency: many holders ask for slots of
// one key with a limit, an rpm and a tpm, and settle at random (served,
// refused, given back, spent less than estimated); at every step the live
// leases stay within the limit, the starts of the window within rpm and
// its tokens within tpm.
func TestBudgetsAreNeverExceededUnderConcurrency(t *testing.T) {
	eachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		c, ks := newClient(t, rdb)
		const key, limit = "model:s", 4
		b := job.Budget{RPM: 60, TPM: 3000}
		var wg sync.WaitGroup
		var mu sync.Mutex
		var violations []string
		check := func() {
			var leases *redis.IntCmd
			var r store.BudgetReading
			if _, err := rdb.TxPipelined(t.Context(), func(p redis.Pipeliner) error {
				leases = p.ZCount(t.Context(), ks.LeaseSet(key), fmt.Sprint("(", time.Now().UnixMilli()), "+inf")
				r = c.Data().BudgetIn(t.Context(), p, key)
				return nil
			}); err != nil {
				t.Error(err)
				return
			}
			st, err := r.State()
			if err != nil {
				t.Error(err)
				return
			}
			if leases.Val() > limit || st.Requests > b.RPM || st.Tokens > b.TPM {
				mu.Lock()
				violations = append(violations, fmt.Sprintf("leases %d, requests %d, tokens %d", leases.Val(), st.Requests, st.Tokens))
				mu.Unlock()
			}
		}
		outcomes := []lease.Outcome{lease.OutcomeOK, lease.OutcomePushback, lease.OutcomeUnused, lease.OutcomeOther}
		for g := range 8 {
			wg.Go(func() {
				for i := range 30 {
					h := fmt.Sprint("g", g, "-", i)
					est := rand.Int64N(600) + 1
					if len(ask(t, c, key, limit, b, est, h)) == 0 {
						check()
						continue
					}
					check()
					settle(t, c, key, limit, b, lease.Settlement{Holder: h, Outcome: outcomes[rand.IntN(len(outcomes))],
						Tokens: rand.Int64N(est + 1), Estimate: est})
					check()
				}
			})
		}
		wg.Wait()
		if len(violations) > 0 {
			t.Fatalf("%d violations, the first: %s", len(violations), violations[0])
		}
	})
}

// TestAdaptiveKeyKeepsAnHourOfMinutes: the settlements of an adaptive key
// leave, per minute, its effective limit and its pushbacks, oldest first;
// a slot over an hour old is skipped, the ring expires when unused, and a
// key that does not adapt keeps none.
func TestAdaptiveKeyKeepsAnHourOfMinutes(t *testing.T) {
	eachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		c, ks := newClient(t, rdb)
		b := job.Budget{Adaptive: true}
		if got := ask(t, c, "model:h", 20, b, 0, "a", "b"); len(got) != 2 {
			t.Fatalf("granted %v, want 2 (the slow start of limit 20)", got)
		}
		// Minutes settled 5, 60 and 70 minutes ago: the one of an hour ago
		// holds the current minute's slot, which its first settlement
		// starts afresh.
		now, err := rdb.Time(t.Context()).Result()
		if err != nil {
			t.Fatal(err)
		}
		m := now.Unix() / 60
		h := ks.LeaseHistory("model:h")
		for _, back := range []int64{5, 60, 70} {
			slot := fmt.Sprint("m", (m-back)%60)
			if err := rdb.HSet(t.Context(), h, slot, m-back, slot+":eff", back, slot+":push", back/5).Err(); err != nil {
				t.Fatal(err)
			}
		}
		settle(t, c, "model:h", 20, b, lease.Settlement{Holder: "a", Outcome: lease.OutcomePushback, Tokens: -1})
		settle(t, c, "model:h", 20, b, lease.Settlement{Holder: "b", Outcome: lease.OutcomeOK, Tokens: -1})

		got, err := c.Data().History(t.Context(), "model:h")
		if err != nil {
			t.Fatal(err)
		}
		// The two settlements may fall either side of a minute's turn.
		if len(got) < 2 || len(got) > 3 || !got[0].At.Equal(time.Unix((m-5)*60, 0)) || got[0].Effective != 5 || got[0].Pushbacks != 1 {
			t.Fatalf("history %+v: want the minute 5 ago (effective 5, 1 pushback) first, then this minute's", got)
		}
		var pushbacks int64
		for i, mn := range got[1:] {
			if !mn.At.After(got[i].At) {
				t.Fatalf("history %+v: not oldest first", got)
			}
			pushbacks += mn.Pushbacks
		}
		if last := got[len(got)-1]; last.Effective != 1 || pushbacks != 1 {
			t.Fatalf("history %+v: want 1 pushback settled now and effective 1 after it", got)
		}
		if ttl := rdb.PTTL(t.Context(), h).Val(); ttl <= 59*time.Minute || ttl > time.Hour {
			t.Fatalf("history expires in %v, want an hour", ttl)
		}

		plain := job.Budget{RPM: 10}
		ask(t, c, "model:plain", 5, plain, 0, "x")
		settle(t, c, "model:plain", 5, plain, lease.Settlement{Holder: "x", Outcome: lease.OutcomePushback, Tokens: -1})
		if n := rdb.Exists(t.Context(), ks.LeaseHistory("model:plain")).Val(); n != 0 {
			t.Fatal("a key that does not adapt keeps a history")
		}
		if got, err := c.Data().History(t.Context(), "model:plain"); err != nil || len(got) != 0 {
			t.Fatalf("history of a key that does not adapt: %+v, %v; want none", got, err)
		}
	})
}

// TestGrantSaysWhenTheBudgetRefused: a grant says its key's budget refused
// a holder the limit had room for (the effective limit reached, the key
// throttled, its rpm full), and not when the slots were full.
func TestGrantSaysWhenTheBudgetRefused(t *testing.T) {
	eachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		c, _ := newClient(t, rdb)
		byBudget := func(key string, limit int, b job.Budget, holders ...string) bool {
			t.Helper()
			g, err := c.AcquireAll(t.Context(), time.Minute, time.Second, []lease.Ask{{Key: key, Limit: limit, Holders: holders, Budget: b}})
			if err != nil {
				t.Fatal(err)
			}
			return g[0].ByBudget
		}
		if byBudget("model:full", 1, job.Budget{RPM: 100}, "a", "b") {
			t.Error("a key whose one slot is taken: refused by its budget, want by its limit")
		}
		adaptive := job.Budget{Adaptive: true}
		if !byBudget("model:adapt", 20, adaptive, "a", "b", "c") { // the slow start: 2 of 20
			t.Error("an adaptive key at its effective limit: not refused by its budget")
		}
		settle(t, c, "model:adapt", 20, adaptive, lease.Settlement{Holder: "a", Outcome: lease.OutcomePushback, Tokens: -1, RetryAfter: time.Minute},
			lease.Settlement{Holder: "b", Outcome: lease.OutcomeOK, Tokens: -1}) // no holder left: only the throttle refuses
		if !byBudget("model:adapt", 20, adaptive, "d") {
			t.Error("a throttled key: not refused by its budget")
		}
		if !byBudget("model:rpm", 10, job.Budget{RPM: 1}, "a", "b") {
			t.Error("a key whose rpm is spent: not refused by its budget")
		}
		if byBudget("model:rpm2", 10, job.Budget{RPM: 2}, "a", "b") {
			t.Error("every holder granted, and ByBudget says refused")
		}
	})
}

// TestSemaphoreCountsInABudgetedKeyButIsNotHeldByIt pins what a Semaphore
// (Acquire, Do, Wait) does with a key that has a budget: its holders take
// the key's slots, so jobs' claims count them against the limit and the
// effective limit; it is not held by the budget itself (a throttle, rpm,
// tpm or effective limit), which it is never told (see Semaphore).
func TestSemaphoreCountsInABudgetedKeyButIsNotHeldByIt(t *testing.T) {
	eachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		c, ks := newClient(t, rdb)
		adaptive := job.Budget{Adaptive: true}
		// Throttled for a minute by a pushback; its effective limit cut to 1.
		ask(t, c, "model:s", 20, adaptive, 0, "job-a")
		settle(t, c, "model:s", 20, adaptive, lease.Settlement{Holder: "job-a", Outcome: lease.OutcomePushback, Tokens: -1, RetryAfter: time.Minute})
		if got := ask(t, c, "model:s", 20, adaptive, 0, "job-b"); len(got) != 0 {
			t.Fatalf("a job's claim was granted %v on a throttled key", got)
		}
		sem := c.Semaphore("model:s", 2, time.Minute)
		p, err := sem.Wait(t.Context(), "sem-1", lease.WaitConfig{MaxWait: 5 * time.Second})
		if err != nil {
			t.Fatalf("Wait on a throttled key: %v, want a permit (it does not read budgets)", err)
		}
		defer p.Release()
		l, err := c.Acquire(t.Context(), "model:s", "sem-2", 2, time.Minute)
		if err != nil {
			t.Fatalf("Acquire on a throttled key: %v, want a lease", err)
		}
		defer c.Release(t.Context(), l)
		// Once the throttle is gone, the semaphore's two holders fill the
		// effective limit (1) that jobs' claims meet.
		if err := rdb.Del(t.Context(), ks.LeaseThrottle("model:s")).Err(); err != nil {
			t.Fatal(err)
		}
		if got := ask(t, c, "model:s", 20, adaptive, 0, "job-c"); len(got) != 0 {
			t.Fatalf("a job's claim was granted %v beside 2 semaphore holders, at an effective limit of 1", got)
		}
		if st := budgetState(t, c, rdb, "model:s"); st.Effective != 1 {
			t.Fatalf("effective limit %v, want 1", st.Effective)
		}
	})
}
