package store

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/internal/store/scripts"
)

var (
	leaseCountScript   = scripts.Load("lease_count.lua")
	leaseAcquireScript = scripts.Load("lease_acquire.lua", "fence.lua", "budget.lua")
	leaseSettleScript  = scripts.Load("lease_settle.lua", "budget.lua")
	leaseRenewScript   = scripts.Load("lease_renew.lua")
)

// LeaseBudget is what a lease script reads of a key's budget (the job
// data model's Budget): a zero field is no limit.
type LeaseBudget struct {
	RPM, TPM int64
	Adaptive bool
}

// IsZero says the key has no budget.
func (b LeaseBudget) IsZero() bool { return b == LeaseBudget{} }

// args lays b out as the lease scripts take it: -1 for no rpm or tpm,
// "1" when adaptive.
func (b LeaseBudget) args() (rpm, tpm int64, adaptive string) {
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

// LeaseAsk asks for slots of one key for several holders, in order.
type LeaseAsk struct {
	Key     string
	Limit   int // -1: the key has no limit, every holder gets a slot
	Holders []string
	// Budget is the key's budget; a holder gets a slot only if it has room
	// too, and what it reserves must be settled (SettleLeases).
	Budget LeaseBudget
	// Tokens holds each holder's estimated tokens, when Budget has a TPM.
	Tokens []int64
}

// GrantsAll says the ask is granted to every holder, whatever the key
// holds: the key has neither a limit nor a budget.
func (a LeaseAsk) GrantsAll() bool { return a.Limit < 0 && a.Budget.IsZero() }

// LeaseGrant is what one LeaseAsk got.
type LeaseGrant struct {
	// Tokens holds each holder's fencing token, 0 for a holder refused
	// for want of room.
	Tokens []fencing.Token
	// RetryAfter is, when a holder was refused, the time until the key's
	// budget has room again if it refused (ByBudget: the throttle ends, the
	// window frees room), else until the key's earliest lease expires.
	RetryAfter time.Duration
	// Waiters says tickets wait in the key's line: a release should wake
	// them.
	Waiters bool
	// ByBudget says the key's budget refused a holder that its limit had
	// room for: the key was throttled, its rpm or tpm full, or its
	// effective limit reached.
	ByBudget bool
}

// AcquireLeases runs every ask in one round trip (a pipeline, split per
// node on a Redis Cluster: each ask is one script on its key's slot), each
// atomic on its own, and returns what each got, in the order of the asks,
// with the error that kept it from Redis (nil for one that ran): one key's
// failure need not fail the others' (on a Cluster each key's lease set is
// on a shard of its own, which may be down alone). An ask that failed has
// the zero LeaseGrant. Leases live for ttl; mark is how long a refusal
// counts the caller as waiting, for the alternation with a semaphore's
// line.
func (s *Store) AcquireLeases(ctx context.Context, ttl, mark time.Duration, asks []LeaseAsk) ([]LeaseGrant, []error) {
	var a *LeasesAcquiring
	_, _ = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		a = s.acquireLeasesIn(ctx, p, ttl, mark, asks)
		return nil
	})
	return a.Each(ctx)
}

// LeasesAcquiring is an AcquireLeases queued on a pipeline.
type LeasesAcquiring struct {
	asks []LeaseAsk
	runs []*scripts.Queued
}

func (s *Store) acquireLeasesIn(ctx context.Context, p redis.Pipeliner, ttl, mark time.Duration, asks []LeaseAsk) *LeasesAcquiring {
	a := &LeasesAcquiring{asks: asks, runs: make([]*scripts.Queued, len(asks))}
	for i, ask := range asks {
		a.runs[i] = leaseAcquireScript.In(ctx, p, s.rdb, s.acquireArgs(ttl, mark, ask))
	}
	return a
}

// Each returns what AcquireLeases does, once the pipeline has run.
func (a *LeasesAcquiring) Each(ctx context.Context) ([]LeaseGrant, []error) {
	grants, errs := make([]LeaseGrant, len(a.asks)), make([]error, len(a.asks))
	for i, ask := range a.asks {
		res, err := a.runs[i].Reply(ctx).Int64Slice()
		if err == nil && len(res) != 4+len(ask.Holders) {
			err = fmt.Errorf("%d values in the reply, want %d", len(res), 4+len(ask.Holders))
		}
		if err != nil {
			errs[i] = fmt.Errorf("store: acquire leases of %q: %w", ask.Key, err)
			continue
		}
		g := LeaseGrant{RetryAfter: time.Duration(res[0]) * time.Millisecond, Waiters: res[2] == 1, ByBudget: res[3] == 1,
			Tokens: make([]fencing.Token, len(ask.Holders))}
		for j := range ask.Holders {
			g.Tokens[j] = fencing.Token(res[4+j])
		}
		grants[i] = g
	}
	return grants, errs
}

func (s *Store) acquireArgs(ttl, mark time.Duration, a LeaseAsk) scripts.Args {
	rpm, tpm, adaptive := a.Budget.args()
	args := make([]any, 0, 6+2*len(a.Holders))
	args = append(args, ttl.Milliseconds(), a.Limit, mark.Milliseconds(), rpm, tpm, adaptive)
	for i, h := range a.Holders {
		args = append(args, h)
		if a.Budget.TPM > 0 {
			var est int64
			if i < len(a.Tokens) {
				est = a.Tokens[i]
			}
			args = append(args, est)
		}
	}
	k := a.Key
	return scripts.Args{Keys: []string{s.keys.LeaseSet(k), s.keys.LeaseFence(k), s.keys.SemTickets(k),
		s.keys.LeaseTurn(k), s.keys.LeaseWaiting(k),
		s.keys.LeaseWindow(k), s.keys.LeaseSpent(k), s.keys.LeaseThrottle(k), s.keys.LeaseAdapt(k)}, Argv: args}
}

// RenewLeases renews the leases held (key → holders) by ttl from now, in
// one round trip, and returns the holders whose leases were gone: those
// must stop. It never adds a lease back.
func (s *Store) RenewLeases(ctx context.Context, ttl time.Duration, held map[string][]string) (gone map[string][]string, err error) {
	type renewal struct {
		key     string
		holders []string
		run     *scripts.Queued
	}
	rs := make([]renewal, 0, len(held))
	_, _ = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for key, holders := range held {
			a := scripts.Args{Keys: []string{s.keys.LeaseSet(key)}, Argv: append([]any{ttl.Milliseconds()}, anys(holders)...)}
			rs = append(rs, renewal{key, holders, leaseRenewScript.In(ctx, p, s.rdb, a)})
		}
		return nil
	})
	for _, r := range rs {
		res, err := r.run.Reply(ctx).Int64Slice()
		if err == nil && len(res) != len(r.holders) {
			err = fmt.Errorf("%d values in the reply, want %d", len(res), len(r.holders))
		}
		if err != nil {
			return nil, fmt.Errorf("store: renew leases of %q: %w", r.key, err)
		}
		for i, expires := range res {
			if expires == 0 {
				if gone == nil {
					gone = map[string][]string{}
				}
				gone[r.key] = append(gone[r.key], r.holders[i])
			}
		}
	}
	return gone, nil
}

// ReleaseLeases frees holders' slots of key. It is idempotent, and a
// release that comes after a lease was reaped removes nothing but its
// holder's own member: it can never free a slot that someone else holds.
func (s *Store) ReleaseLeases(ctx context.Context, key string, holders ...string) error {
	if err := s.releaseLeasesIn(ctx, s.rdb, key, holders...).Err(); err != nil {
		return fmt.Errorf("store: release leases of %q: %w", key, err)
	}
	return nil
}

func (s *Store) releaseLeasesIn(ctx context.Context, c redis.Cmdable, key string, holders ...string) *redis.IntCmd {
	return c.ZRem(ctx, s.keys.LeaseSet(key), anys(holders)...)
}

// LeaseOutcome is how a holder's use of a budgeted key ended.
type LeaseOutcome string

// The outcomes a settlement reports.
const (
	// LeaseOK: the upstream served it. An adaptive key grows.
	LeaseOK LeaseOutcome = "ok"
	// LeasePushback: the upstream refused it for capacity (a 429). An
	// adaptive key is cut, and throttled for RetryAfter.
	LeasePushback LeaseOutcome = "pushback"
	// LeaseUnused: the slot was given back unused: its reservation leaves
	// the window.
	LeaseUnused LeaseOutcome = "unused"
	// LeaseOther: anything else (a failure, a cancel): the reservation
	// stands, the effective limit does not move.
	LeaseOther LeaseOutcome = "other"
)

// LeaseSettlement is how one holder's slot of a budgeted key ended.
type LeaseSettlement struct {
	Holder  string
	Outcome LeaseOutcome
	// Tokens is what it actually spent, which replaces its estimate in
	// the window; -1 when not known (the estimate stands). Both count at
	// most maxLeaseTokens, and the estimate at most the key's tpm, as its
	// acquire reserved it.
	Tokens, Estimate int64
	// RetryAfter is how long the upstream asked to be left alone, for a
	// pushback; 0 when it did not say.
	RetryAfter time.Duration
}

// maxLeaseTokens bounds a settlement's tokens, so the script's numbers
// stay exact integers: the largest rpm or tpm of a budget (job.MaxBudget).
const maxLeaseTokens = 1_000_000_000_000

// SettleLeases releases holders' slots of key, which has limit and budget
// b, with what each reserved settled (see LeaseSettlement), and returns
// the key's effective limit after it (0 for a key that does not adapt).
// It is idempotent: a settlement sent twice settles once.
func (s *Store) SettleLeases(ctx context.Context, key string, limit int, b LeaseBudget, ss []LeaseSettlement) (effective int64, err error) {
	return settled(key, leaseSettleScript.RunArgs(ctx, s.rdb, s.settleArgs(key, limit, b, ss)))
}

// LeaseSettling is a SettleLeases queued on a pipeline.
type LeaseSettling struct {
	key string
	run *scripts.Queued
}

func (s *Store) settleLeasesIn(ctx context.Context, p redis.Pipeliner, key string, limit int, b LeaseBudget, ss []LeaseSettlement) *LeaseSettling {
	return &LeaseSettling{key, leaseSettleScript.In(ctx, p, s.rdb, s.settleArgs(key, limit, b, ss))}
}

// Settled returns what SettleLeases does, once the pipeline has run.
func (l *LeaseSettling) Settled(ctx context.Context) (effective int64, err error) {
	return settled(l.key, l.run.Reply(ctx))
}

func settled(key string, cmd *redis.Cmd) (int64, error) {
	n, err := cmd.Int64()
	if err != nil {
		return 0, fmt.Errorf("store: settle leases of %q: %w", key, err)
	}
	return n, nil
}

func (s *Store) settleArgs(key string, limit int, b LeaseBudget, ss []LeaseSettlement) scripts.Args {
	_, tpm, adaptive := b.args()
	args := make([]any, 0, 3+5*len(ss))
	args = append(args, limit, tpm, adaptive)
	for _, st := range ss {
		args = append(args, st.Holder, string(st.Outcome), min(max(st.Tokens, -1), maxLeaseTokens), min(max(st.Estimate, 0), maxLeaseTokens),
			st.RetryAfter.Milliseconds())
	}
	return scripts.Args{Keys: []string{s.keys.LeaseSet(key), s.keys.LeaseWindow(key), s.keys.LeaseSpent(key),
		s.keys.LeaseThrottle(key), s.keys.LeaseAdapt(key), s.keys.LeaseWaiting(key), s.keys.LeaseHistory(key)}, Argv: args}
}

// LeaseCount returns how many live leases hold key, and the time until the
// earliest of them expires.
func (s *Store) LeaseCount(ctx context.Context, key string) (held int, soonest time.Duration, err error) {
	res, err := leaseCountScript.Run(ctx, s.rdb, []string{s.keys.LeaseSet(key)}).Int64Slice()
	if err == nil && len(res) != 2 {
		err = fmt.Errorf("%d values in the reply, want 2", len(res))
	}
	if err != nil {
		return 0, 0, fmt.Errorf("store: count leases of %q: %w", key, err)
	}
	return int(res[0]), time.Duration(res[1]) * time.Millisecond, nil
}

// LeaseRoom reports whether key has a free slot under limit now, and when
// it has none, the time until its earliest lease expires. It takes
// nothing: a slot free now may be taken before the caller asks for it.
func (s *Store) LeaseRoom(ctx context.Context, key string, limit int) (ok bool, retryAfter time.Duration, err error) {
	n, wait, err := s.LeaseCount(ctx, key)
	if err != nil || n < limit {
		return err == nil, 0, err
	}
	if wait == 0 {
		wait = time.Second // a limit of 0 has no lease to wait for
	}
	return false, wait, nil
}
