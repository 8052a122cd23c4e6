package store

import (
	"github.com/leasehold/leasehold/job"

	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// readRetained queues on p the read of the bytes tenant's jobs in each of
// queues are charged (internal/store/scripts/stats.lua's retained bytes).
func (s *Store) readRetained(ctx context.Context, p redis.Pipeliner, tenant string, queues []string) map[string]*redis.StringCmd {
	cmds := make(map[string]*redis.StringCmd, len(queues))
	for _, q := range queues {
		if cmds[q] == nil {
			cmds[q] = p.HGet(ctx, s.keys.QueueRetained(q, tenant), "*")
		}
	}
	return cmds
}

// retainedOf reads the replies of readRetained: no hash is 0 bytes.
func retainedOf(cmds map[string]*redis.StringCmd) (map[string]int64, error) {
	kept := make(map[string]int64, len(cmds))
	for q, cmd := range cmds {
		v, err := cmd.Result()
		if errors.Is(err, redis.Nil) {
			continue
		}
		if err == nil {
			kept[q], err = strconv.ParseInt(v, 10, 64)
		}
		if err != nil {
			return nil, fmt.Errorf("job: retained bytes in %s: %w", q, err)
		}
	}
	return kept, nil
}

// Retained returns the bytes tenant's jobs in queues are charged, summed:
// what Cap.MaxBytes bounds.
func (s *Store) Retained(ctx context.Context, tenant string, queues []string) (int64, error) {
	var cmds map[string]*redis.StringCmd
	if _, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		cmds = s.readRetained(ctx, p, tenant, queues)
		return nil
	}); err != nil && !errors.Is(err, redis.Nil) {
		return 0, fmt.Errorf("job: retained bytes: %w", err)
	}
	kept, err := retainedOf(cmds)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, b := range kept {
		n += b
	}
	return n, nil
}

// reread reads again the bytes the batch's tenant's jobs in q are charged,
// after the batch created some there.
func (b *batch) reread(ctx context.Context, q string) error {
	n, err := b.s.Retained(ctx, b.tenant, []string{q})
	if err != nil {
		return err
	}
	b.kept[q] = n
	return nil
}

// overQuota returns a *QuotaError when tenant's jobs in limit's queues and
// queue are charged limit.MaxBytes or more: a retry adds no bytes, but
// keeps its job longer than its retention would.
func (s *Store) overQuota(ctx context.Context, tenant, queue string, limit job.Cap) error {
	if limit.MaxBytes <= 0 {
		return nil
	}
	qs := append(slices.Clone(limit.Queues), queue)
	slices.Sort(qs)
	n, err := s.Retained(ctx, tenant, slices.Compact(qs))
	if err != nil {
		return err
	}
	if n >= limit.MaxBytes {
		return &job.QuotaError{Bytes: n, Max: limit.MaxBytes}
	}
	return nil
}
