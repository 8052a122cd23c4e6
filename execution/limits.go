package execution

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/internal/store"
	"github.com/leasehold/leasehold/internal/store/keys"
	"github.com/leasehold/leasehold/internal/store/scripts"
	"github.com/leasehold/leasehold/job"
)

// limits is a worker's copy of the concurrency limits and budgets Redis
// holds (the API writes them), refreshed every few seconds: a change takes
// effect at the next refresh.
type limits struct {
	mu      sync.RWMutex
	m       map[string]int64      // key or "prefix:*" -> limit
	budgets map[string]job.Budget // key or "prefix:*" -> budget
}

// of returns key's limit, -1 for none (see scripts.LimitOf); a share
// key's is its key's per_tenant.
func (l *limits) of(key string) int64 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if base, _, ok := cutShareKey(key); ok {
		if b, _ := scripts.Lookup(l.budgets, base); b.PerTenant > 0 {
			return b.PerTenant
		}
		return -1
	}
	return scripts.LimitOf(l.m, key)
}

// ask returns an ask for slots of key, with no holders yet: its limit
// and budget as the worker knows them.
func (l *limits) ask(key string) store.LeaseAsk {
	return store.LeaseAsk{Key: key, Limit: int(l.of(key)), Budget: leaseBudget(l.budgetOf(key))}
}

// leaseBudget is what the lease scripts read of b.
func leaseBudget(b job.Budget) store.LeaseBudget {
	return store.LeaseBudget{RPM: b.RPM, TPM: b.TPM, Adaptive: b.Adaptive}
}

// budgetOf returns key's budget, the zero Budget for none; a share key's
// is its tenant's share of its key's rpm and tpm (per_tenant/limit of
// each, at least 1).
func (l *limits) budgetOf(key string) job.Budget {
	l.mu.RLock()
	defer l.mu.RUnlock()
	base, _, share := cutShareKey(key)
	if !share {
		b, _ := scripts.Lookup(l.budgets, key)
		return b
	}
	b, _ := scripts.Lookup(l.budgets, base)
	return b.Share(scripts.LimitOf(l.m, base))
}

// withShares returns a job's concurrency keys with, for each of them whose
// limit has a per-tenant share, its share key for the job's tenant: a slot
// of each is a slot of the share that tenant's jobs hold of the key.
func (l *limits) withShares(keys []string) []string {
	l.mu.RLock()
	defer l.mu.RUnlock()
	var out []string
	for _, k := range keys {
		if b, _ := scripts.Lookup(l.budgets, k); b.PerTenant > 0 {
			if out == nil {
				out = slices.Clone(keys)
			}
			out = append(out, shareKey(k, tenantKey(keys)))
		}
	}
	if out == nil {
		return keys
	}
	return out
}

// label is key's value of a metric's key label (scripts.Label); false
// for a share key, whose executions and tokens its key counts already.
func (l *limits) label(key string) (string, bool) {
	if _, _, share := cutShareKey(key); share {
		return "", false
	}
	l.mu.RLock()
	defer l.mu.RUnlock()
	return scripts.Label(l.m, l.budgets, key), true
}

// labels returns the labels of keys (label), each once: a job that names
// two keys of one label counts once under it.
func (l *limits) labels(keys []string) []string {
	var out []string
	for _, k := range keys {
		if label, ok := l.label(k); ok && !slices.Contains(out, label) {
			out = append(out, label)
		}
	}
	return out
}

// shareKey is the key whose slots and budget are tenant's share of key.
func shareKey(key, tenant string) string { return keys.ShareKey(key, tenant) }

// cutShareKey returns the key and tenant key of a share key.
func cutShareKey(key string) (base, tenant string, ok bool) { return strings.Cut(key, "@") }

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
	budgets := map[string]job.Budget{}
	for k, v := range budgetsCmd.Val() {
		if b, err := job.ParseBudget(v); err == nil && b != (job.Budget{}) {
			budgets[k] = b
		}
	}
	l.mu.Lock()
	l.m, l.budgets = m, budgets
	l.mu.Unlock()
	return nil
}
