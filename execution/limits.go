package execution

import (
	"context"
	"strconv"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/internal/scripts"
)

// limits is a worker's copy of the concurrency limits Redis holds (the API
// writes them), refreshed every few seconds: a change takes effect at the
// next refresh.
type limits struct {
	mu sync.RWMutex
	m  map[string]int64 // key or "prefix:*" -> limit
}

// of returns key's limit, -1 for none (see scripts.LimitOf).
func (l *limits) of(key string) int64 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return scripts.LimitOf(l.m, key)
}

func (l *limits) refresh(ctx context.Context, rdb redis.UniversalClient, key string) error {
	all, err := rdb.HGetAll(ctx, key).Result()
	if err != nil {
		return err
	}
	m := make(map[string]int64, len(all))
	for k, v := range all {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil && n >= 0 {
			m[k] = n
		}
	}
	l.mu.Lock()
	l.m = m
	l.mu.Unlock()
	return nil
}
