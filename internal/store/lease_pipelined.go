package store

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// The lease operations that execution's claim and finish queue on their
// own pipelines, until those move into the store and fuse with them here.

// AcquireLeasesIn queues AcquireLeases's asks on p; Each reads them once p
// has run.
func (s *Store) AcquireLeasesIn(ctx context.Context, p redis.Pipeliner, ttl, mark time.Duration, asks []LeaseAsk) *LeasesAcquiring {
	return s.acquireLeasesIn(ctx, p, ttl, mark, asks)
}

// SettleLeasesIn queues SettleLeases on p; Settled reads its reply once p
// has run.
func (s *Store) SettleLeasesIn(ctx context.Context, p redis.Pipeliner, key string, limit int, b LeaseBudget, ss []LeaseSettlement) *LeaseSettling {
	return s.settleLeasesIn(ctx, p, key, limit, b, ss)
}

// ReleaseLeasesIn queues ReleaseLeases on p.
func (s *Store) ReleaseLeasesIn(ctx context.Context, p redis.Pipeliner, key string, holders ...string) {
	s.releaseLeasesIn(ctx, p, key, holders...)
}
