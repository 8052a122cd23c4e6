package execution

import (
	"context"
	"strconv"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/internal/keys"
	"github.com/leasehold/leasehold/internal/scripts"
	"github.com/leasehold/leasehold/lease"
)

// limits is a worker's copy of the concurrency limits and budgets Redis
// holds (the API writes them), refreshed every few seconds: a change takes
// effect at the next refresh.
type limits struct {
	mu      sync.RWMutex
	m       map[string]int64        // key or "prefix:*" -> limit
	budgets map[string]lease.Budget // key or "prefix:*" -> budget
}

// of returns key's limit, -1 for none (see scripts.LimitOf).
func (l *limits) of(key string) int64 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return scripts.LimitOf(l.m, key)
}

// ask returns an ask for slots of key, with no holders yet: its limit
// and budget as the worker knows them.
func (l *limits) ask(key string) lease.Ask {
	return lease.Ask{Key: key, Limit: int(l.of(key)), Budget: l.budgetOf(key)}
}

// budgetOf returns key's budget, the zero Budget for none.
func (l *limits) budgetOf(key string) lease.Budget {
	l.mu.RLock()
	defer l.mu.RUnlock()
	b, _ := scripts.Lookup(l.budgets, key)
	return b
}

func (l *limits) refresh(ctx context.Context, rdb redis.UniversalClient, ks keys.Space) error {
	var limitsCmd, budgetsCmd *redis.MapStringStringCmd
	if _, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		limitsCmd = p.HGetAll(ctx, ks.Limits())
		budgetsCmd = p.HGetAll(ctx, ks.Budgets())
		return nil
	}); err != nil {
		return err
	}
	m := make(map[string]int64, len(limitsCmd.Val()))
	for k, v := range limitsCmd.Val() {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil && n >= 0 {
			m[k] = n
		}
	}
	budgets := map[string]lease.Budget{}
	for k, v := range budgetsCmd.Val() {
		if b, err := lease.ParseBudget(v); err == nil && !b.IsZero() {
			budgets[k] = b
		}
	}
	l.mu.Lock()
	l.m, l.budgets = m, budgets
	l.mu.Unlock()
	return nil
}
