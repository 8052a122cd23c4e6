package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/internal/store/scripts"
)

var cancelRequestScript = scripts.Load("cancel_request.lua")

// RequestCancel writes id's cancel flag, which lives at least ttl (rounded
// up to the millisecond); requesting again never shortens it.
func (s *Store) RequestCancel(ctx context.Context, id string, ttl time.Duration) error {
	ms := (ttl + time.Millisecond - 1) / time.Millisecond
	if err := cancelRequestScript.Run(ctx, s.rdb, []string{s.keys.CancelFlag(id)}, int64(ms)).Err(); err != nil {
		return fmt.Errorf("store: write cancel flag: %w", err)
	}
	return nil
}

// CancelFlagged says whether each of ids has a cancel flag, in one round
// trip (a pipeline: on a Redis Cluster each flag is in a slot of its own).
// An id whose read failed is false, and the error says why: on a Cluster
// some nodes may have answered when others did not.
func (s *Store) CancelFlagged(ctx context.Context, ids ...string) ([]bool, error) {
	cmds := make([]*redis.IntCmd, len(ids))
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range ids {
			cmds[i] = p.Exists(ctx, s.keys.CancelFlag(id))
		}
		return nil
	})
	set := make([]bool, len(ids))
	for i, cmd := range cmds {
		set[i] = cmd.Err() == nil && cmd.Val() == 1
	}
	if err != nil {
		return set, fmt.Errorf("store: read cancel flags: %w", err)
	}
	return set, nil
}

// CancelRequestedAt returns when cancellation of id was first requested,
// on Redis's clock, as its flag records it: the zero time when the flag is
// gone or predates the flag recording it.
func (s *Store) CancelRequestedAt(ctx context.Context, id string) (time.Time, error) {
	v, err := s.rdb.Get(ctx, s.keys.CancelFlag(id)).Int64()
	switch {
	case errors.Is(err, redis.Nil):
		return time.Time{}, nil
	case err != nil:
		return time.Time{}, fmt.Errorf("store: read cancel flag: %w", err)
	case v <= 1: // "1": written before the time was recorded
		return time.Time{}, nil
	}
	return time.UnixMilli(v), nil
}

// ClearCancels removes the cancel flags of ids in one round trip (a
// pipeline, out to each node on a Redis Cluster).
func (s *Store) ClearCancels(ctx context.Context, ids ...string) error {
	if _, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, id := range ids {
			p.Del(ctx, s.keys.CancelFlag(id))
		}
		return nil
	}); err != nil {
		return fmt.Errorf("store: clear cancel flags: %w", err)
	}
	return nil
}
