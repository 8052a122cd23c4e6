package store

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/internal/store/scripts"
)

var (
	scheduleTenantsScript = scripts.Load("schedule_due_tenants.lua", transitionLib...)
	scheduleDueScript     = scripts.Load("schedule_due.lua", transitionLib...)
	scheduleAdvanceScript = scripts.Load("schedule_advance.lua", transitionLib...)
)

// ScheduleRef names one schedule.
type ScheduleRef struct{ Tenant, Name string }

// DueSchedules is what TakeDueSchedules took.
type DueSchedules struct {
	Now time.Time // the Redis clock when they were taken
	Due []ScheduleRef
	// More: more may be due than were taken (some tenant had more than
	// its share, or as many tenants were due as one read reads).
	More bool
}

// TakeDueSchedules takes up to n schedules due now and holds them for
// hold, so that other schedulers leave them alone meanwhile. Fair across
// tenants: it reads up to n tenants with schedules due, those looked at
// longest ago first, and takes an even share of n from each (at least
// one), so one tenant's many due schedules delay another's by at most a
// read while fewer than n tenants are due. Two round trips when anything
// is due, one when nothing is.
func (s *Store) TakeDueSchedules(ctx context.Context, n int, hold time.Duration) (DueSchedules, error) {
	res, err := scheduleStrings(scheduleTenantsScript.Run(ctx, s.rdb, []string{s.keys.ScheduleTenants()}, n))
	if err == nil && len(res) == 0 {
		err = fmt.Errorf("an empty reply")
	}
	if err != nil {
		return DueSchedules{}, fmt.Errorf("store: due tenants: %w", err)
	}
	now, err := scheduleMillis(res[0])
	if err != nil || len(res) == 1 {
		return DueSchedules{Now: now}, err
	}
	tenants := res[1:]
	keys := make([]string, 1, 1+len(tenants))
	keys[0] = s.keys.ScheduleTenants()
	args := make([]any, 2, 2+len(tenants))
	args[0], args[1] = max(1, n/len(tenants)), hold.Milliseconds()
	for _, t := range tenants {
		keys = append(keys, s.keys.ScheduleTenantDue(t))
		args = append(args, t)
	}
	res, err = scheduleStrings(scheduleDueScript.Run(ctx, s.rdb, keys, args...))
	if err == nil && (len(res) < 2 || len(res)%2 != 0) {
		err = fmt.Errorf("%d values in the reply, want an even number from 2", len(res))
	}
	if err != nil {
		return DueSchedules{}, fmt.Errorf("store: due schedules: %w", err)
	}
	out := DueSchedules{Due: make([]ScheduleRef, 0, len(res)/2-1), More: res[1] == "1" || len(tenants) == n}
	if out.Now, err = scheduleMillis(res[0]); err != nil {
		return DueSchedules{}, err
	}
	for i := 2; i < len(res); i += 2 {
		out.Due = append(out.Due, ScheduleRef{Tenant: res[i], Name: res[i+1]})
	}
	return out, nil
}

// AdvanceScheduleParams is the second step of a fire: the compare-and-set
// that moves a schedule past the due time it fired.
type AdvanceScheduleParams struct {
	Tenant, Name string
	Gen          string    // the generation the fire read
	Fired        time.Time // the due time fired
	Next         time.Time // the next due time
	// Look is when a scheduler should look at it again: Next, unless the
	// fire is deferred (Fired == Next then).
	Look time.Time
	// JobID and JobQueue are the fired job's; "" when none (skipped,
	// deferred).
	JobID, JobQueue string
	// Outcome is what the due time came to ("fired", "skipped",
	// "deferred"), or "" for nothing to record.
	Outcome string
}

// AdvanceSchedule moves the schedule on, once however many schedulers
// fired the same due time (see schedule_advance.lua). changed says that
// the due time before came to another outcome.
func (s *Store) AdvanceSchedule(ctx context.Context, p AdvanceScheduleParams) (changed bool, err error) {
	n, err := scheduleAdvanceScript.Run(ctx, s.rdb, []string{s.keys.Schedule(p.Tenant, p.Name), s.keys.ScheduleTenantDue(p.Tenant), s.keys.ScheduleTenants()},
		p.Name, p.Gen, p.Fired.UnixMilli(), p.Next.UnixMilli(), p.Look.UnixMilli(), p.JobID, p.JobQueue, p.Outcome, p.Tenant).Int()
	if err != nil {
		return false, fmt.Errorf("store: advance schedule %s: %w", p.Name, err)
	}
	return n == 2, nil
}

// ScheduleFired reports whether tenant's job of idempotency key key
// exists already: a fire of a due time that another scheduler (or a
// retry after a crash) submitted.
func (s *Store) ScheduleFired(ctx context.Context, tenant, key string) (bool, error) {
	n, err := s.rdb.Exists(ctx, s.keys.Idempotency(tenant, key)).Result()
	if err != nil {
		return false, fmt.Errorf("store: read idempotency record: %w", err)
	}
	return n > 0, nil
}

// scheduleStrings reads a script's array reply of strings and integers (a
// time in ms) as strings.
func scheduleStrings(cmd *redis.Cmd) ([]string, error) {
	vals, err := cmd.Slice()
	out := make([]string, len(vals))
	for i, v := range vals {
		out[i] = fmt.Sprint(v)
	}
	return out, err
}

func scheduleMillis(v string) (time.Time, error) {
	ms, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("store: due schedules: now %q: %w", v, err)
	}
	return time.UnixMilli(ms).UTC(), nil
}
