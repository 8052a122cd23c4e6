package store

import (
	"time"

	"github.com/leasehold/leasehold/job"

	"context"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// UsageDay is one UTC day's counts of a tenant (usage.Day).
type UsageDay struct {
	Date   time.Time        // midnight UTC
	Counts map[string]int64 // by counter; counters with no usage are absent
}

// UsageDropAt is when the counts of the UTC day of at are dropped, kept
// for retention after the day ends: what a queue's day of lifecycle counts
// expires at.
func UsageDropAt(at time.Time, retention time.Duration) time.Time {
	y, m, d := at.UTC().Date()
	return time.Date(y, m, d, 0, 0, 0, 0, time.UTC).Add(24 * time.Hour).Add(retention)
}

// AddUsage adds to days (as usage.Counters.Get returned them for tenant)
// what the queues counted of tenant's jobs on those days: the lifecycle
// counters (usage.Lifecycle), which the scripts that create, start and
// end a job count in its queue's usage hash, in the same step (see
// internal/store/scripts/stats.lua). It reads every queue's days in one round
// trip.
func (s *Store) AddUsage(ctx context.Context, tenant string, counters []string, days []UsageDay) error {
	if err := job.ValidateTenant(tenant); err != nil {
		return err
	}
	queues, err := s.queues(ctx)
	if err != nil || len(days) == 0 {
		return err
	}
	fields := make([]string, len(counters))
	for i, c := range counters {
		fields[i] = c + "/" + tenant
	}
	cmds := make([][]*redis.SliceCmd, len(queues))
	if _, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, q := range queues {
			cmds[i] = make([]*redis.SliceCmd, len(days))
			for d, day := range days {
				cmds[i][d] = p.HMGet(ctx, s.keys.QueueUsage(q, day.Date), fields...)
			}
		}
		return nil
	}); err != nil {
		return fmt.Errorf("job: usage of %s: %w", tenant, err)
	}
	for i, q := range queues {
		for d, cmd := range cmds[i] {
			for k, v := range cmd.Val() {
				if v == nil {
					continue
				}
				text, _ := v.(string)
				n, err := strconv.ParseInt(text, 10, 64)
				if err != nil {
					return fmt.Errorf("job: usage of %s in %s: %s holds %q", tenant, q, fields[k], text)
				}
				if days[d].Counts == nil {
					days[d].Counts = map[string]int64{}
				}
				days[d].Counts[counters[k]] += n
			}
		}
	}
	return nil
}
