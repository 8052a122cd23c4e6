package lease

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/internal/store/scripts"
	"github.com/leasehold/leasehold/job"
)

func budgetArgs(b job.Budget) (rpm, tpm int64, adaptive string) {
	rpm, tpm, adaptive = -1, -1, "0"
	if b.RPM > 0 {
		rpm = b.RPM
	}
	if b.TPM > 0 {
		tpm = b.TPM
	}
	if b.Adaptive {
		adaptive = "1"
	}
	return rpm, tpm, adaptive
}

// Outcome is how a holder's use of a budgeted key ended.
type Outcome string

// The outcomes a settlement reports.
const (
	// OutcomeOK: the upstream served it. An adaptive key grows.
	OutcomeOK Outcome = "ok"
	// OutcomePushback: the upstream refused it for capacity (a 429). An
	// adaptive key is cut, and throttled for RetryAfter.
	OutcomePushback Outcome = "pushback"
	// OutcomeUnused: the slot was given back unused: its reservation
	// leaves the window.
	OutcomeUnused Outcome = "unused"
	// OutcomeOther: anything else (a failure, a cancel): the reservation
	// stands, the effective limit does not move.
	OutcomeOther Outcome = "other"
)

// Settlement is how one holder's slot of a budgeted key ended.
type Settlement struct {
	Holder  string
	Outcome Outcome
	// Tokens is what it actually spent, which replaces its estimate in
	// the window; -1 when not known (the estimate stands). Both count at
	// most MaxBudget, and the estimate at most the key's tpm, as its
	// claim reserved it.
	Tokens, Estimate int64
	// RetryAfter is how long the upstream asked to be left alone, for a
	// pushback; 0 when it did not say.
	RetryAfter time.Duration
}

// Settling is a settlement queued on a caller's pipeline (SettleIn).
type Settling struct {
	key string
	run *scripts.Queued
}

// SettleIn queues on p the release of holders' slots of key, which has
// budget b, with what each reserved settled (see Settlement); Settled reads
// its reply. It is idempotent: a settlement sent twice settles once.
func (c *Client) SettleIn(ctx context.Context, p redis.Pipeliner, key string, limit int, b job.Budget, ss []Settlement) *Settling {
	return &Settling{key, settleScript.In(ctx, p, c.rdb, c.settleArgs(key, limit, b, ss))}
}

// Settle is SettleIn in a round trip of its own. It returns the key's
// effective limit after it (0 for a key that does not adapt).
func (c *Client) Settle(ctx context.Context, key string, limit int, b job.Budget, ss []Settlement) (effective int64, err error) {
	return settled(key, settleScript.RunArgs(ctx, c.rdb, c.settleArgs(key, limit, b, ss)))
}

// Settled returns the key's effective limit after the settlement, once
// its pipeline has run (see Settle).
func (s *Settling) Settled(ctx context.Context) (effective int64, err error) {
	return settled(s.key, s.run.Reply(ctx))
}

func settled(key string, cmd *redis.Cmd) (int64, error) {
	n, err := cmd.Int64()
	if err != nil {
		return 0, fmt.Errorf("lease: settle %q: %w", key, err)
	}
	return n, nil
}

func (c *Client) settleArgs(key string, limit int, b job.Budget, ss []Settlement) scripts.Args {
	_, tpm, adaptive := budgetArgs(b)
	args := make([]any, 0, 3+5*len(ss))
	args = append(args, limit, tpm, adaptive)
	for _, s := range ss {
		// Bounded so the script's numbers stay exact integers.
		args = append(args, s.Holder, string(s.Outcome), min(max(s.Tokens, -1), job.MaxBudget), min(max(s.Estimate, 0), job.MaxBudget),
			s.RetryAfter.Milliseconds())
	}
	return scripts.Args{Keys: c.settleKeys(key), Argv: args}
}

func (c *Client) settleKeys(key string) []string {
	return []string{c.keys.LeaseSet(key), c.keys.LeaseWindow(key), c.keys.LeaseSpent(key),
		c.keys.LeaseThrottle(key), c.keys.LeaseAdapt(key), c.keys.LeaseWaiting(key), c.keys.LeaseHistory(key)}
}
