package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/internal/store/scripts"
)

// QueueDepth is how much of a queue waits to run.
type QueueDepth struct {
	// Lanes counts the ready jobs of each lane (the fair hash's counts:
	// see scripts.LaneCounts); a lane is one set of concurrency keys.
	Lanes map[string]int64
	// Oldest is how long the first job of the lane at the head of the
	// ready set, the job the next claim takes, has been ready; 0 for none.
	Oldest time.Duration
}

// Depth reads queue's depth in three round trips whatever its size. A
// ready job's newest event is the "queued" one that made it ready (nothing
// else writes to a job that does not run), and its id (a stream id) is
// that moment on Redis's clock; the age is taken on Redis's clock too. A
// delayed job counts from its submit.
func (s *Store) Depth(ctx context.Context, queue string) (QueueDepth, error) {
	var fair *redis.MapStringStringCmd
	var head *redis.StringSliceCmd
	if _, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		fair = p.HGetAll(ctx, s.keys.QueueFair(queue))
		head = p.ZRange(ctx, s.keys.QueueReady(queue), 0, 0)
		return nil
	}); err != nil {
		return QueueDepth{}, fmt.Errorf("store: depth of %s: %w", queue, err)
	}
	d := QueueDepth{Lanes: scripts.LaneCounts(fair.Val())}
	if len(head.Val()) == 0 {
		return d, nil
	}
	first, err := s.rdb.ZRange(ctx, s.keys.QueueLane(queue, head.Val()[0]), 0, 0).Result()
	if err != nil {
		return d, fmt.Errorf("store: depth of %s: %w", queue, err)
	}
	if len(first) == 0 {
		return d, nil // the lane emptied meanwhile
	}
	var last *redis.XMessageSliceCmd
	var states *redis.StringCmd
	var now *redis.TimeCmd
	if _, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		last = p.XRevRangeN(ctx, s.keys.JobEvents(queue, first[0]), "+", "-", 1)
		states = p.HGet(ctx, s.keys.Job(queue, first[0]), "states")
		now = p.Time(ctx)
		return nil
	}); err != nil && !errors.Is(err, redis.Nil) {
		return QueueDepth{}, fmt.Errorf("store: depth of %s: %w", queue, err)
	}
	// The newest event is in the stream or at the front of the states
	// field (scripts/states.lua), both ids <ms>-<seq>.
	var at int64
	if len(last.Val()) > 0 {
		ms, _, _ := strings.Cut(last.Val()[0].ID, "-")
		at, _ = strconv.ParseInt(ms, 10, 64)
	}
	if ms, _, ok := strings.Cut(states.Val(), "-"); ok {
		if n, err := strconv.ParseInt(ms, 10, 64); err == nil {
			at = max(at, n)
		}
	}
	if at == 0 {
		return d, nil // the job ended and its events expired meanwhile
	}
	d.Oldest = max(now.Val().Sub(time.UnixMilli(at)), 0)
	return d, nil
}
