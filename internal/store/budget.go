package store

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/internal/store/scripts"
)

var budgetScript = scripts.Load("lease_budget.lua", "budget.lua")

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
func (s *Store) BudgetIn(ctx context.Context, p redis.Pipeliner, key string) BudgetReading {
	return BudgetReading{budgetScript.Eval(ctx, p, scripts.Args{Keys: []string{s.keys.LeaseWindow(key), s.keys.LeaseSpent(key),
		s.keys.LeaseThrottle(key), s.keys.LeaseAdapt(key)}})}
}

// State returns what the read found.
func (r BudgetReading) State() (BudgetState, error) {
	res, err := r.cmd.Slice()
	if err == nil && len(res) != 4 {
		err = fmt.Errorf("%d values in the reply, want 4", len(res))
	}
	if err != nil {
		return BudgetState{}, fmt.Errorf("store: budget: %w", err)
	}
	var out BudgetState
	var ok [4]bool
	out.Requests, ok[0] = res[0].(int64)
	out.Tokens, ok[1] = res[1].(int64)
	eff, ok2 := res[2].(string)
	until, ok3 := res[3].(int64)
	ok[2], ok[3] = ok2, ok3
	if ok != [4]bool{true, true, true, true} {
		return BudgetState{}, fmt.Errorf("store: budget: a value of the wrong type in %v", res)
	}
	if out.Effective, err = strconv.ParseFloat(eff, 64); err != nil {
		return BudgetState{}, fmt.Errorf("store: budget: effective limit %q", eff)
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
func (s *Store) History(ctx context.Context, key string) ([]Minute, error) {
	var now *redis.TimeCmd
	var ring *redis.MapStringStringCmd
	if _, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		now = p.Time(ctx)
		ring = p.HGetAll(ctx, s.keys.LeaseHistory(key))
		return nil
	}); err != nil {
		return nil, fmt.Errorf("store: history of %q: %w", key, err)
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
			return nil, fmt.Errorf("store: history of %q: minute %d holds %q, %q", key, m, h[slot+":eff"], h[slot+":push"])
		}
		out = append(out, Minute{At: time.Unix(m*60, 0).UTC(), Effective: eff, Pushbacks: push})
	}
	return out, nil
}
