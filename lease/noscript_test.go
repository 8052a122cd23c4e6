package lease_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/job"
	"github.com/leasehold/leasehold/lease"
)

// After Redis lost its script cache (SCRIPT FLUSH, as a restart or a
// failover leaves it), every lease script still runs, and once: the
// acquire and the renew, which are pipelined, the settlement pipelined
// (SettleIn) and alone (Settle), and the budget read.
func TestLeaseScriptsRunAfterScriptFlush(t *testing.T) {
	t.Parallel()
	rdb := testenv.StartRedis(t).Client(t)
	ctx := t.Context()
	c, err := lease.New(rdb, lease.Config{Prefix: testenv.Prefix(t)})
	if err != nil {
		t.Fatal(err)
	}
	flush := func() {
		t.Helper()
		if err := rdb.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}
	b := job.Budget{RPM: 100, TPM: 1000}

	flush()
	if got := ask(t, c, "model:a", 2, b, 10, "e1", "e2", "e3"); len(got) != 2 {
		t.Fatalf("acquire after SCRIPT FLUSH granted %v, want two of three", got)
	}
	flush()
	if gone, err := c.RenewAll(ctx, time.Minute, map[string][]string{"model:a": {"e1", "e2", "e3"}}); err != nil ||
		len(gone["model:a"]) != 1 || gone["model:a"][0] != "e3" {
		t.Fatalf("renew after SCRIPT FLUSH: gone %v, %v; want [e3]", gone, err)
	}
	flush()
	var s *lease.Settling
	_, _ = rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		s = c.SettleIn(ctx, p, "model:a", 2, b, []lease.Settlement{{Holder: "e1", Outcome: lease.OutcomeOK, Tokens: 7, Estimate: 10}})
		return nil
	})
	if _, err := s.Settled(ctx); err != nil {
		t.Fatalf("pipelined settlement after SCRIPT FLUSH: %v", err)
	}
	flush()
	settle(t, c, "model:a", 2, b, lease.Settlement{Holder: "e2", Outcome: lease.OutcomeOK, Tokens: 5, Estimate: 10})
	flush()
	if st := budgetState(t, c, rdb, "model:a"); st.Requests != 2 || st.Tokens != 12 {
		t.Errorf("budget after the settlements: %+v, want 2 requests of 12 tokens", st)
	}
	if n, err := c.InUse(ctx, "model:a"); err != nil || n != 0 {
		t.Errorf("in use after both settled: %d, %v; want 0", n, err)
	}
}
