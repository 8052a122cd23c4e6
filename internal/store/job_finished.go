package store

import (
	"github.com/leasehold/leasehold/job"

	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Finished returns, for each of the last FinishedMinutes minutes of the
// Redis clock (oldest first, the current one last), how many of queue's
// jobs ended in it, by outcome. The scripts that end jobs count them in
// the queue's stats hash in the same step (internal/store/scripts/finished.lua),
// so every API replica reads the same counts. They are of every tenant.
func (s *Store) Finished(ctx context.Context, queue string) ([]job.Minute, error) {
	if job.ValidateQueue(queue) != nil {
		return nil, job.ErrNoQueue
	}
	var known *redis.BoolCmd
	var now *redis.TimeCmd
	var ring *redis.MapStringStringCmd
	if _, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		known = p.SIsMember(ctx, s.keys.Queues(), queue)
		now = p.Time(ctx)
		ring = p.HGetAll(ctx, s.keys.QueueStats(queue))
		return nil
	}); err != nil {
		return nil, fmt.Errorf("job: finished of %s: %w", queue, err)
	}
	if !known.Val() {
		return nil, job.ErrNoQueue
	}
	h := ring.Val()
	last := now.Val().Unix() / 60
	minutes := make([]job.Minute, job.FinishedMinutes)
	for i := range minutes {
		m := last - job.FinishedMinutes + 1 + int64(i)
		minutes[i].At = time.Unix(m*60, 0).UTC()
		slot := "m" + strconv.FormatInt(m%60, 10)
		if h[slot] != strconv.FormatInt(m, 10) {
			continue // nothing ended in m: the slot is empty or holds an older minute
		}
		for state, n := range map[job.State]*int64{job.StateSucceeded: &minutes[i].Succeeded, job.StateFailed: &minutes[i].Failed,
			job.StateCancelled: &minutes[i].Cancelled, job.StateExpired: &minutes[i].Expired} {
			*n, _ = strconv.ParseInt(h[slot+":"+string(state)], 10, 64) // absent: 0
		}
	}
	return minutes, nil
}
