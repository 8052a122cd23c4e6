package store

import (
	"context"
	"fmt"
	"time"

	"github.com/leasehold/leasehold/internal/store/scripts"
)

var leaseCountScript = scripts.Load("lease_count.lua")

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
