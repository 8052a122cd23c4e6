package lease

import (
	"context"
	"time"

	"github.com/leasehold/leasehold/internal/store"
	"github.com/leasehold/leasehold/job"
)

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

// Settle releases holders' slots of key, which has budget b, with what
// each reserved settled (see Settlement). It returns the key's effective
// limit after it (0 for a key that does not adapt). It is idempotent: a
// settlement sent twice settles once.
func (c *Client) Settle(ctx context.Context, key string, limit int, b job.Budget, ss []Settlement) (effective int64, err error) {
	stored := make([]store.LeaseSettlement, len(ss))
	for i, s := range ss {
		stored[i] = store.LeaseSettlement{Holder: s.Holder, Outcome: store.LeaseOutcome(s.Outcome), Tokens: s.Tokens,
			Estimate: s.Estimate, RetryAfter: s.RetryAfter}
	}
	return c.store.SettleLeases(ctx, key, limit, storedBudget(b), stored)
}
