package lease_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/internal/store/keys"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/internal/testsignal"
	"github.com/leasehold/leasehold/job"
	"github.com/leasehold/leasehold/lease"
)

// waited is what a Wait run in the background returned.
type waited struct {
	p   *lease.Permit
	err error
}

// waitBehind runs sem.Wait for holder in the background, with waiting
// fired each time it goes to sleep in line without a slot.
func waitBehind(ctx context.Context, sem *lease.Semaphore, holder string, cfg lease.WaitConfig, waiting *testsignal.Signal) <-chan waited {
	got := make(chan waited, 1)
	go func() {
		p, err := sem.Wait(ctx, holder, lease.WithWaitingSignal(cfg, waiting))
		got <- waited{p, err}
	}()
	return got
}

// stillWaiting waits until the waiter has gone to sleep in line polls times,
// refused at each, and checks it holds no permit yet.
func stillWaiting(t testing.TB, got <-chan waited, waiting *testsignal.Signal, polls int) {
	t.Helper()
	returned := func() {
		select {
		case w := <-got:
			t.Fatalf("the waiter's Wait returned (permit %t, error %v) while it should wait in line", w.p != nil, w.err)
		default:
		}
	}
	defer returned() // also when a wait for the signal failed: say why
	for range polls {
		waiting.Wait(t, 10*time.Second)
	}
}

// grantedNow waits for the waiter's permit.
func grantedNow(t testing.TB, got <-chan waited) *lease.Permit {
	t.Helper()
	select {
	case w := <-got:
		if w.err != nil {
			t.Fatalf("Wait: %v, want a permit", w.err)
		}
		return w.p
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter was not granted a slot")
	}
	return nil
}

func settlePermit(t testing.TB, p *lease.Permit, outcome lease.Outcome, tokens int64) {
	t.Helper()
	if err := p.Settle(outcome, tokens, 0); err != nil {
		t.Fatal(err)
	}
}

// A line whose key has slots free but its minute's requests or tokens
// spent holds its head until the minute rolls on, then grants it.
func TestWaitBudgetHoldsTheLineUntilTheMinuteFrees(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		budget job.Budget
		tokens int64
	}{
		{"rpm", job.Budget{RPM: 1}, 0},
		{"tpm", job.Budget{TPM: 1000}, 600},
	} {
		t.Run(tc.name, func(t *testing.T) {
			eachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
				w := newWaitLine(t, rdb)
				sem := w.c.Semaphore(w.key, 5, time.Minute)
				cfg := lease.WaitConfig{Budget: tc.budget, Tokens: tc.tokens, Poll: lease.MinPoll}
				first, err := sem.Wait(t.Context(), "first", cfg)
				if err != nil {
					t.Fatal(err)
				}
				// It spent what it estimated: its start and its tokens stay
				// in the minute after its slot is free.
				settlePermit(t, first, lease.OutcomeOK, tc.tokens)

				waiting := testsignal.New()
				got := waitBehind(t.Context(), sem, "second", cfg, waiting)
				stillWaiting(t, got, waiting, 3)
				if n := w.held(t); n != 0 {
					t.Fatalf("%d slots held while the budget is spent, want 0", n)
				}
				age(t, rdb, w.ks, w.key)
				settlePermit(t, grantedNow(t, got), lease.OutcomeOK, tc.tokens)
			})
		})
	}
}

// Settling a permit with the tokens it really spent, below its estimate,
// gives the rest of its reservation back to the minute at once: a waiter
// that did not fit beside the estimate fits beside the usage.
func TestPermitSettleFreesTheTokensNotSpent(t *testing.T) {
	eachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		w := newWaitLine(t, rdb)
		sem := w.c.Semaphore(w.key, 5, time.Minute)
		cfg := lease.WaitConfig{Budget: job.Budget{TPM: 1000}, Tokens: 600, Poll: lease.MinPoll}
		first, err := sem.Wait(t.Context(), "first", cfg)
		if err != nil {
			t.Fatal(err)
		}
		waiting := testsignal.New()
		got := waitBehind(t.Context(), sem, "second", cfg, waiting)
		stillWaiting(t, got, waiting, 3) // 600 reserved + 600 > 1000

		settlePermit(t, first, lease.OutcomeOK, 100) // 100 + 600 fit
		settlePermit(t, grantedNow(t, got), lease.OutcomeOK, 600)
	})
}

// A waiter takes the slots of the keys of Also only at the head of the
// line with room on its key, and gives back what it took when one of them
// refuses: asleep in line, it holds nothing another holder could use.
func TestWaiterInLineHoldsNoSlotOfItsOtherKeys(t *testing.T) {
	t.Parallel()
	w := newWaitLine(t, testenv.Redis(t).Client(t))
	nc := testenv.NATS(t).Conn(t)
	const tenant, region = "tenant:a", "region:eu"
	sem := w.c.Semaphore(w.key, 1, time.Minute)
	// A minute's poll: the waiter moves only when woken, so what it holds
	// is read while it sleeps.
	cfg := lease.WaitConfig{NATS: nc, Poll: time.Minute,
		Also: []lease.Ask{{Key: tenant, Limit: 5}, {Key: region, Limit: 1}}}
	slots := func(when string, key string, want int) {
		t.Helper()
		if n := inUse(t, w.c, key); n != want {
			t.Fatalf("%s: %d slots of %s held, want %d", when, n, key, want)
		}
	}

	first, err := sem.Wait(t.Context(), "first", lease.WaitConfig{NATS: nc, Also: cfg.Also[:1]})
	if err != nil {
		t.Fatal(err)
	}
	waiting := testsignal.New()
	got := waitBehind(t.Context(), sem, "second", cfg, waiting)
	stillWaiting(t, got, waiting, 1)
	slots("behind a full key", tenant, 1) // first's alone
	slots("behind a full key", region, 0)

	// The region is full when the line's key frees: the waiter heads the
	// line with room, takes the tenant's slot, is refused the region's.
	blocker := mustAcquire(t, w.c, region, "job", 1, time.Minute)
	settlePermit(t, first, lease.OutcomeOK, -1) // wakes the line
	stillWaiting(t, got, waiting, 1)
	slots("refused the region", tenant, 0)
	slots("refused the region", w.key, 0)

	if err := w.c.Release(t.Context(), blocker); err != nil {
		t.Fatal(err)
	}
	if err := nc.Publish(w.ks.SemWake(w.key), nil); err != nil { // as a release of the key would
		t.Fatal(err)
	}
	second := grantedNow(t, got)
	for _, key := range []string{w.key, tenant, region} {
		slots("granted", key, 1)
	}
	settlePermit(t, second, lease.OutcomeOK, -1)
	for _, key := range []string{tenant, region} {
		slots("settled", key, 0)
	}
}

// A key with per_tenant gives each tenant a share key of its own, asked
// for with it (Also): one tenant is refused beyond its share of the slots
// and of the tokens while the key has room, and waits without holding up
// another tenant behind it.
func TestTenantShareRefusesBeyondTheShare(t *testing.T) {
	eachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		w := newWaitLine(t, rdb)
		const limit = 4
		b := job.Budget{TPM: 4000, PerTenant: 1} // a share: 1 slot, 1000 tokens a minute
		sem := w.c.Semaphore(w.key, limit, time.Minute)
		// of is the wait of a call of tenant's, as the chat endpoint
		// builds it; maxWait 0 waits as long as the test runs.
		of := func(tenant string, tokens int64, maxWait time.Duration) lease.WaitConfig {
			share := lease.Ask{Key: keys.ShareKey(w.key, tenant), Limit: int(b.PerTenant), Budget: b.Share(limit)}
			return lease.WaitConfig{Budget: b, Tokens: tokens, Poll: lease.MinPoll, MaxWait: maxWait, Also: []lease.Ask{share}}
		}

		a1, err := sem.Wait(t.Context(), "a1", of("tenant:a", 100, 0))
		if err != nil {
			t.Fatal(err)
		}
		waiting := testsignal.New()
		a2 := waitBehind(t.Context(), sem, "a2", of("tenant:a", 100, 0), waiting)
		stillWaiting(t, a2, waiting, 3) // 3 of the key's 4 slots free
		b1, err := sem.Wait(t.Context(), "b1", of("tenant:b", 100, 10*time.Second))
		if err != nil {
			t.Fatalf("tenant b behind tenant a's refused waiter: %v, want a permit", err)
		}
		settlePermit(t, b1, lease.OutcomeOK, -1)

		settlePermit(t, a1, lease.OutcomeOK, 100)
		a2p := grantedNow(t, a2)
		settlePermit(t, a2p, lease.OutcomeOK, 850) // tenant a's minute: 950 of 1000

		_, err = sem.Wait(t.Context(), "a3", of("tenant:a", 100, 500*time.Millisecond))
		if !errors.Is(err, lease.ErrTimedOut) {
			t.Fatalf("tenant a beyond its share of the tokens: %v, want %v", err, lease.ErrTimedOut)
		}
		b2, err := sem.Wait(t.Context(), "b2", of("tenant:b", 100, 0))
		if err != nil {
			t.Fatalf("tenant b with its share unused: %v, want a permit", err)
		}
		settlePermit(t, b2, lease.OutcomeOK, 100)
	})
}
