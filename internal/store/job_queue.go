package store

import (
	"github.com/leasehold/leasehold/job"

	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// Pause stops every worker claiming from queue, within one heartbeat
// interval; resume (paused false) lets them claim again. Jobs stay in the
// queue, running executions go on, and the queue's due work (expired
// leases, deadlines, retention) goes on too. Pausing a queue that has no
// job yet names it, so GET /v1/queues shows it. It returns the queue's
// counts as they are after the change.
func (s *Store) Pause(ctx context.Context, queue string, paused bool) (job.QueueStats, error) {
	if err := job.ValidateQueue(queue); err != nil {
		return job.QueueStats{}, &job.ValidationError{Errors: []job.FieldError{{Field: "name", Message: err.Error()}}}
	}
	// Both sets share a slot, in one round trip; a plain pipeline, not
	// MULTI, so that an acknowledged pause waits for its replicas
	// (internal/replicas). Either write alone is harmless, and a retry
	// completes it.
	if _, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		if paused {
			p.SAdd(ctx, s.keys.Queues(), queue)
			p.SAdd(ctx, s.keys.PausedQueues(), queue)
		} else {
			p.SRem(ctx, s.keys.PausedQueues(), queue)
		}
		return nil
	}); err != nil {
		return job.QueueStats{}, fmt.Errorf("job: pause %s: %w", queue, err)
	}
	stats, err := s.stats(ctx, []string{queue}, "")
	if err != nil {
		return job.QueueStats{}, err
	}
	return stats[0], nil
}
