package lease

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/internal/store/scripts"
)

// Budget is what an upstream allows a key besides its concurrency: requests
// and tokens per rolling minute, fleet-wide, and whether the key's
// concurrency adapts to the upstream's pushback. The zero Budget is none.
// The claims of jobs (package execution) check and reserve it in the same
// step as a slot, and so does Semaphore.Wait's line when given it
// (WaitConfig.Budget).
type Budget struct {
	RPM      int64 // executions that may start per rolling minute; 0: no budget
	TPM      int64 // tokens per rolling minute; 0: no budget
	Adaptive bool  // the effective limit follows the upstream's pushback
	// PerTenant is the most slots one tenant may hold of the key, and the
	// same share of its limit's RPM and TPM; 0: no share. The key does not
	// enforce it itself: a claim asks for a slot of the tenant's share key
	// too (package execution), a key of its own with that limit and budget.
	PerTenant int64
}

// Share is one tenant's share of a key whose limit is limit and budget b:
// PerTenant/limit of its RPM and TPM, at least 1 each where b has one; the
// zero Budget when b has no PerTenant or limit is not above 0.
func (b Budget) Share(limit int64) Budget {
	if b.PerTenant <= 0 || limit <= 0 {
		return Budget{}
	}
	part := min(b.PerTenant, limit)
	share := func(n int64) int64 {
		if n <= 0 {
			return 0
		}
		// n·part/limit without overflow: n is at most MaxBudget.
		return max(n/limit*part+n%limit*part/limit, 1)
	}
	return Budget{RPM: share(b.RPM), TPM: share(b.TPM)}
}

// IsZero reports whether b is no budget of the key itself: no rpm, tpm or
// adaptation (a per-tenant share is enforced through share keys).
func (b Budget) IsZero() bool { return b.RPM == 0 && b.TPM == 0 && !b.Adaptive }

func (b Budget) args() (rpm, tpm int64, adaptive string) {
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

// MaxBudget is the largest RPM or TPM.
const MaxBudget = 1_000_000_000_000

// String writes b in the form ParseBudget reads: "rpm=3000;tpm=400000;adaptive;per_tenant=50"
// ("" for none).
func (b Budget) String() string {
	var parts []string
	if b.RPM > 0 {
		parts = append(parts, "rpm="+strconv.FormatInt(b.RPM, 10))
	}
	if b.TPM > 0 {
		parts = append(parts, "tpm="+strconv.FormatInt(b.TPM, 10))
	}
	if b.Adaptive {
		parts = append(parts, "adaptive")
	}
	if b.PerTenant > 0 {
		parts = append(parts, "per_tenant="+strconv.FormatInt(b.PerTenant, 10))
	}
	return strings.Join(parts, ";")
}

// ParseBudget reads options in the form "rpm=N;tpm=N;adaptive;per_tenant=N", in any order,
// each at most once: the part of a LEASEHOLD_LIMITS entry after its limit.
func ParseBudget(s string) (Budget, error) {
	var b Budget
	seen := map[string]bool{}
	for opt := range strings.SplitSeq(s, ";") {
		opt = strings.TrimSpace(opt)
		if opt == "" {
			continue
		}
		name, value, hasValue := strings.Cut(opt, "=")
		name = strings.TrimSpace(name)
		if seen[name] {
			return Budget{}, fmt.Errorf("option %s given twice", name)
		}
		seen[name] = true
		switch name {
		case "adaptive":
			if hasValue {
				return Budget{}, fmt.Errorf("option adaptive takes no value")
			}
			b.Adaptive = true
		case "rpm", "tpm", "per_tenant":
			n, err := strconv.ParseInt(strings.TrimSpace(value), 10, 64)
			if !hasValue || err != nil || n < 1 || n > MaxBudget {
				return Budget{}, fmt.Errorf("option %s: want %s=N, N from 1 to %d", name, name, int64(MaxBudget))
			}
			switch name {
			case "rpm":
				b.RPM = n
			case "tpm":
				b.TPM = n
			default:
				b.PerTenant = n
			}
		default:
			return Budget{}, fmt.Errorf("unknown option %q: want rpm=N, tpm=N, adaptive or per_tenant=N", name)
		}
	}
	return b, nil
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
func (c *Client) SettleIn(ctx context.Context, p redis.Pipeliner, key string, limit int, b Budget, ss []Settlement) *Settling {
	return &Settling{key, settleScript.In(ctx, p, c.rdb, c.settleArgs(key, limit, b, ss))}
}

// Settle is SettleIn in a round trip of its own. It returns the key's
// effective limit after it (0 for a key that does not adapt).
func (c *Client) Settle(ctx context.Context, key string, limit int, b Budget, ss []Settlement) (effective int64, err error) {
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

func (c *Client) settleArgs(key string, limit int, b Budget, ss []Settlement) scripts.Args {
	_, tpm, adaptive := b.args()
	args := make([]any, 0, 3+5*len(ss))
	args = append(args, limit, tpm, adaptive)
	for _, s := range ss {
		// Bounded so the script's numbers stay exact integers.
		args = append(args, s.Holder, string(s.Outcome), min(max(s.Tokens, -1), MaxBudget), min(max(s.Estimate, 0), MaxBudget),
			s.RetryAfter.Milliseconds())
	}
	return scripts.Args{Keys: c.settleKeys(key), Argv: args}
}

func (c *Client) settleKeys(key string) []string {
	return []string{c.keys.LeaseSet(key), c.keys.LeaseWindow(key), c.keys.LeaseSpent(key),
		c.keys.LeaseThrottle(key), c.keys.LeaseAdapt(key), c.keys.LeaseWaiting(key), c.keys.LeaseHistory(key)}
}

// BudgetState is what a budgeted key's rolling minute holds now.
type BudgetState struct {
	Requests int64 // executions started in the last minute
	Tokens   int64 // their tokens: estimates, or actual usage once settled
	// Effective is an adaptive key's effective limit (0 for a key not
	// adapting yet); ThrottledUntil is zero unless throttled now.
	Effective      float64
	ThrottledUntil time.Time
}

// BudgetReading is a budget's state read on a caller's pipeline.
type BudgetReading struct{ cmd *redis.Cmd }

// BudgetIn queues on p a read of key's budget state; State reads it once p
// has run. It writes nothing.
func (c *Client) BudgetIn(ctx context.Context, p redis.Pipeliner, key string) BudgetReading {
	return BudgetReading{budgetScript.Eval(ctx, p, scripts.Args{Keys: []string{c.keys.LeaseWindow(key), c.keys.LeaseSpent(key),
		c.keys.LeaseThrottle(key), c.keys.LeaseAdapt(key)}})}
}

// State returns what the read found.
func (r BudgetReading) State() (BudgetState, error) {
	res, err := r.cmd.Slice()
	if err == nil && len(res) != 4 {
		err = fmt.Errorf("%d values in the reply, want 4", len(res))
	}
	if err != nil {
		return BudgetState{}, fmt.Errorf("lease: budget: %w", err)
	}
	var out BudgetState
	var ok [4]bool
	out.Requests, ok[0] = res[0].(int64)
	out.Tokens, ok[1] = res[1].(int64)
	eff, ok2 := res[2].(string)
	until, ok3 := res[3].(int64)
	ok[2], ok[3] = ok2, ok3
	if ok != [4]bool{true, true, true, true} {
		return BudgetState{}, fmt.Errorf("lease: budget: a value of the wrong type in %v", res)
	}
	if out.Effective, err = strconv.ParseFloat(eff, 64); err != nil {
		return BudgetState{}, fmt.Errorf("lease: budget: effective limit %q", eff)
	}
	if until > 0 {
		out.ThrottledUntil = time.UnixMilli(until)
	}
	return out, nil
}

// HistoryMinutes is how far back History reaches: the last hour.
const HistoryMinutes = 60

// Minute is one minute of an adaptive key's history.
type Minute struct {
	At        time.Time // the minute's start, UTC
	Effective int64     // the effective limit at the minute's last settlement
	Pushbacks int64     // the pushbacks settled in the minute
}

// History returns the minutes of the last hour (Redis clock) in which an
// adaptive key was settled, oldest first: the ring lease_settle.lua keeps.
// A key that never adapted, or not for an hour, has none.
func (c *Client) History(ctx context.Context, key string) ([]Minute, error) {
	var now *redis.TimeCmd
	var ring *redis.MapStringStringCmd
	if _, err := c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		now = p.Time(ctx)
		ring = p.HGetAll(ctx, c.keys.LeaseHistory(key))
		return nil
	}); err != nil {
		return nil, fmt.Errorf("lease: history of %q: %w", key, err)
	}
	h := ring.Val()
	last := now.Val().Unix() / 60
	var out []Minute
	for m := last - HistoryMinutes + 1; m <= last; m++ {
		slot := "m" + strconv.FormatInt(m%60, 10)
		if h[slot] != strconv.FormatInt(m, 10) {
			continue // not settled in m: the slot is empty or holds an older minute
		}
		eff, err1 := strconv.ParseInt(h[slot+":eff"], 10, 64)
		push, err2 := strconv.ParseInt(h[slot+":push"], 10, 64)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("lease: history of %q: minute %d holds %q, %q", key, m, h[slot+":eff"], h[slot+":push"])
		}
		out = append(out, Minute{At: time.Unix(m*60, 0).UTC(), Effective: eff, Pushbacks: push})
	}
	return out, nil
}
