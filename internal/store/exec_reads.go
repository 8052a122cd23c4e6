package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// PausedQueues reads the set of paused queues, which a worker claims
// from no more.
func (s *Store) PausedQueues(ctx context.Context) (map[string]bool, error) {
	names, err := s.rdb.SMembers(ctx, s.keys.PausedQueues()).Result()
	if err != nil {
		return nil, fmt.Errorf("store: paused queues: %w", err)
	}
	set := make(map[string]bool, len(names))
	for _, n := range names {
		set[n] = true
	}
	return set, nil
}

// QueuedJob names a job by its queue and id.
type QueuedJob struct{ Queue, ID string }

// JobsCancelRequested reads, in one round trip, whether each job of jobs has a
// cancel requested (its record's cancel_requested); false for a job with
// no queue ("": not asked) or no record.
func (s *Store) JobsCancelRequested(ctx context.Context, jobs []QueuedJob) ([]bool, error) {
	cmds := make([]*redis.StringCmd, len(jobs))
	if _, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, j := range jobs {
			if j.Queue != "" {
				cmds[i] = p.HGet(ctx, s.keys.Job(j.Queue, j.ID), "cancel_requested")
			}
		}
		return nil
	}); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("store: read cancel_requested: %w", err)
	}
	out := make([]bool, len(jobs))
	for i, cmd := range cmds {
		out[i] = cmd != nil && cmd.Val() == "1"
	}
	return out, nil
}
