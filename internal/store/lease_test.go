package store

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/internal/testenv"
)

// eachBackend runs test on a single Redis and on a Redis Cluster, each
// with a store of a prefix of the test's own.
func eachBackend(t *testing.T, test func(t *testing.T, rdb redis.UniversalClient, s *Store)) {
	t.Parallel()
	for _, b := range testenv.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			test(t, b.Client, New(b.Client, Config{Prefix: testenv.Prefix(t)}))
		})
	}
}

// A key of limit 2 grants two of three holders, each a token greater
// than the last, and refuses the third with the time until a slot frees;
// a key without a limit grants everyone, and a holder's renewal finds its
// lease until it is released.
func TestAcquireRenewReleaseLeases(t *testing.T) {
	eachBackend(t, func(t *testing.T, _ redis.UniversalClient, s *Store) {
		ctx := t.Context()
		grants, errs := s.AcquireLeases(ctx, time.Minute, time.Second, []LeaseAsk{
			{Key: "model:a", Limit: 2, Holders: []string{"e1", "e2", "e3"}},
			{Key: "free", Limit: -1, Holders: []string{"e1", "e2", "e3"}},
		})
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
		a := grants[0]
		if a.Tokens[0] == 0 || a.Tokens[1] <= a.Tokens[0] || a.Tokens[2] != 0 {
			t.Errorf("tokens of a key of limit 2: %v, want two rising then 0", a.Tokens)
		}
		if a.RetryAfter <= 50*time.Second || a.RetryAfter > time.Minute+time.Second || a.ByBudget || a.Waiters {
			t.Errorf("refusal: %+v, want retry after about a minute, not by budget, no waiters", a)
		}
		if slices.Contains(grants[1].Tokens, 0) {
			t.Errorf("tokens of a key without a limit: %v, want all granted", grants[1].Tokens)
		}

		gone, err := s.RenewLeases(ctx, time.Minute, map[string][]string{"model:a": {"e1", "e2", "e3"}})
		if err != nil || !slices.Equal(gone["model:a"], []string{"e3"}) || len(gone) != 1 {
			t.Fatalf("renew: gone %v, %v; want e3 of model:a", gone, err)
		}
		if err := s.ReleaseLeases(ctx, "model:a", "e1"); err != nil {
			t.Fatal(err)
		}
		if err := s.ReleaseLeases(ctx, "model:a", "e1"); err != nil {
			t.Fatalf("a second release: %v, want none: it is idempotent", err)
		}
		if n, _, err := s.LeaseCount(ctx, "model:a"); err != nil || n != 1 {
			t.Errorf("leases after a release: %d, %v; want 1", n, err)
		}
		if gone, err := s.RenewLeases(ctx, time.Minute, map[string][]string{"model:a": {"e1"}}); err != nil || len(gone["model:a"]) != 1 {
			t.Errorf("renew of a released lease: gone %v, %v; want it gone", gone, err)
		}
	})
}

// A key's budget refuses a holder its limit had room for, and says so;
// a settlement gives back what an unused holder reserved.
func TestLeaseBudgetRefusesAndSettles(t *testing.T) {
	eachBackend(t, func(t *testing.T, _ redis.UniversalClient, s *Store) {
		ctx := t.Context()
		b := LeaseBudget{RPM: 1}
		ask := []LeaseAsk{{Key: "model:b", Limit: 5, Holders: []string{"e1", "e2"}, Budget: b}}
		grants, errs := s.AcquireLeases(ctx, time.Minute, time.Second, ask)
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
		if g := grants[0]; g.Tokens[0] == 0 || g.Tokens[1] != 0 || !g.ByBudget || g.RetryAfter <= 0 {
			t.Fatalf("grant under rpm 1: %+v, want e1 granted, e2 refused by the budget with a time to retry", g)
		}
		if _, err := s.SettleLeases(ctx, "model:b", 5, b, []LeaseSettlement{{Holder: "e1", Outcome: LeaseUnused, Tokens: -1}}); err != nil {
			t.Fatal(err)
		}
		if n, _, err := s.LeaseCount(ctx, "model:b"); err != nil || n != 0 {
			t.Errorf("leases after the settlement: %d, %v; want 0", n, err)
		}
		ask[0].Holders = []string{"e2"}
		if grants, errs := s.AcquireLeases(ctx, time.Minute, time.Second, ask); errs[0] != nil || grants[0].Tokens[0] == 0 {
			t.Errorf("after an unused settlement: %+v, %v; want a slot: the request left the window", grants, errs[0])
		}
	})
}

// A ticket joins the line, is ready at its head without asking for the
// slot, is granted it when it asks, and leaving says it was granted; a
// second ticket behind a full key waits, and leaves pending.
func TestTicketPollAndLeave(t *testing.T) {
	eachBackend(t, func(t *testing.T, _ redis.UniversalClient, s *Store) {
		ctx := t.Context()
		poll := TicketPoll{Key: "line", Ticket: "t1", Holder: "h1", TicketTTL: 3 * time.Second, LeaseTTL: time.Minute, Limit: 1, Join: true}
		if st, err := s.PollTicket(ctx, poll); err != nil || st != (TicketStatus{Pending: true, Ready: true}) {
			t.Fatalf("join without asking for the slot: %+v, %v; want pending and ready", st, err)
		}
		poll.Join, poll.Grant = false, true
		st, err := s.PollTicket(ctx, poll)
		if err != nil || st.Pending || st.Token == 0 {
			t.Fatalf("poll at the head asking for the slot: %+v, %v; want a token", st, err)
		}
		second := TicketPoll{Key: "line", Ticket: "t2", Holder: "h2", TicketTTL: 3 * time.Second, LeaseTTL: time.Minute, Limit: 1,
			Join: true, Grant: true}
		if st, err := s.PollTicket(ctx, second); err != nil || st != (TicketStatus{Pending: true}) {
			t.Fatalf("a ticket behind a full key: %+v, %v; want pending, not ready", st, err)
		}
		if was, err := s.LeaveLine(ctx, TicketLeave{Key: "line", Ticket: "t1", TicketTTL: 3 * time.Second}); err != nil || was != "GRANTED" {
			t.Errorf("leave of the granted ticket: %q, %v; want GRANTED", was, err)
		}
		if was, err := s.LeaveLine(ctx, TicketLeave{Key: "line", Ticket: "t2", TimedOut: true, TicketTTL: 3 * time.Second}); err != nil || was != "PENDING" {
			t.Errorf("leave of the waiting ticket: %q, %v; want PENDING", was, err)
		}
		if was, err := s.LeaveLine(ctx, TicketLeave{Key: "line", Ticket: "t2", TicketTTL: 3 * time.Second}); err != nil || was != "TIMED_OUT" {
			t.Errorf("second leave: %q, %v; want TIMED_OUT, as the first left it", was, err)
		}
		second.Join = false
		if st, err := s.PollTicket(ctx, second); err != nil || st != (TicketStatus{}) {
			t.Errorf("poll of a ticket that left: %+v, %v; want it ended", st, err)
		}
	})
}

// A lease set of the wrong type fails its own ask, and no other.
func TestAcquireLeasesFailsOneAskAlone(t *testing.T) {
	t.Parallel()
	rdb := testenv.Redis(t).Client(t)
	s := New(rdb, Config{Prefix: testenv.Prefix(t)})
	ctx := t.Context()
	if err := rdb.Set(ctx, s.keys.LeaseSet("broken"), "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	grants, errs := s.AcquireLeases(ctx, time.Minute, time.Second, []LeaseAsk{
		{Key: "broken", Limit: 1, Holders: []string{"e1"}},
		{Key: "fine", Limit: 1, Holders: []string{"e1"}},
	})
	if errs[0] == nil || grants[0].Tokens != nil {
		t.Errorf("ask of a broken key: %+v, %v; want an error and no grant", grants[0], errs[0])
	}
	if errs[1] != nil || grants[1].Tokens[0] == 0 {
		t.Errorf("ask of a fine key beside it: %+v, %v; want a slot", grants[1], errs[1])
	}
}

// After Redis lost its script cache (SCRIPT FLUSH, as a restart or a
// failover leaves it), every lease script still runs, and once: the
// acquire and the renew, which are pipelined, the settlement pipelined and
// alone, the budget read, and the line's poll and leave.
func TestLeaseScriptsRunAfterScriptFlush(t *testing.T) {
	t.Parallel()
	rdb := testenv.StartRedis(t).Client(t)
	ctx := t.Context()
	s := New(rdb, Config{Prefix: testenv.Prefix(t)})
	flush := func() {
		t.Helper()
		if err := rdb.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}
	b := LeaseBudget{RPM: 100, TPM: 1000}

	flush()
	grants, errs := s.AcquireLeases(ctx, time.Minute, time.Second, []LeaseAsk{{Key: "model:a", Limit: 2, Holders: []string{"e1", "e2", "e3"},
		Budget: b, Tokens: []int64{10, 10, 10}}})
	if errs[0] != nil || !slices.Equal(grants[0].Tokens[2:], []fencing.Token{0}) || slices.Contains(grants[0].Tokens[:2], 0) {
		t.Fatalf("acquire after SCRIPT FLUSH granted %+v, %v; want two of three", grants, errs[0])
	}
	flush()
	if gone, err := s.RenewLeases(ctx, time.Minute, map[string][]string{"model:a": {"e1", "e2", "e3"}}); err != nil ||
		!slices.Equal(gone["model:a"], []string{"e3"}) {
		t.Fatalf("renew after SCRIPT FLUSH: gone %v, %v; want [e3]", gone, err)
	}
	flush()
	var settling *LeaseSettling
	_, _ = rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		settling = s.settleLeasesIn(ctx, p, "model:a", 2, b, []LeaseSettlement{{Holder: "e1", Outcome: LeaseOK, Tokens: 7, Estimate: 10}})
		return nil
	})
	if _, err := settling.Settled(ctx); err != nil {
		t.Fatalf("pipelined settlement after SCRIPT FLUSH: %v", err)
	}
	flush()
	if _, err := s.SettleLeases(ctx, "model:a", 2, b, []LeaseSettlement{{Holder: "e2", Outcome: LeaseOK, Tokens: 5, Estimate: 10}}); err != nil {
		t.Fatalf("settlement after SCRIPT FLUSH: %v", err)
	}
	flush()
	var r BudgetReading
	if _, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		r = s.BudgetIn(ctx, p, "model:a")
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if st, err := r.State(); err != nil || st.Requests != 2 || st.Tokens != 12 {
		t.Errorf("budget after the settlements: %+v, %v; want 2 requests of 12 tokens", st, err)
	}
	if n, _, err := s.LeaseCount(ctx, "model:a"); err != nil || n != 0 {
		t.Errorf("in use after both settled: %d, %v; want 0", n, err)
	}
	flush()
	poll := TicketPoll{Key: "model:a", Ticket: "t1", Holder: "h1", TicketTTL: 3 * time.Second, LeaseTTL: time.Minute, Limit: 2,
		Budget: b, Tokens: 10, Join: true, Grant: true}
	if st, err := s.PollTicket(ctx, poll); err != nil || st.Token == 0 {
		t.Fatalf("poll after SCRIPT FLUSH: %+v, %v; want a slot", st, err)
	}
	flush()
	if was, err := s.LeaveLine(ctx, TicketLeave{Key: "model:a", Ticket: "t1", TicketTTL: 3 * time.Second}); err != nil || was != "GRANTED" {
		t.Errorf("leave after SCRIPT FLUSH: %q, %v; want GRANTED", was, err)
	}
}
