package store

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// ScheduleRecord is one schedule as Redis keeps it (the hash that
// schedule_create.lua writes and schedule_advance.lua moves on). The spec
// is stored as its canonical JSON, which the schedule package reads.
type ScheduleRecord struct {
	Tenant, Name string
	Spec         string // canonical JSON
	// Gen is a fresh id per creation: a name re-created fires anew.
	Gen    string
	Paused bool
	// Next is the next due time; Created when it was created (both Redis
	// clock, to the millisecond).
	Next, Created time.Time
	// LastRun is the due time of the last fire and LastJob the job it
	// fired; zero and "" before the first fire.
	LastRun time.Time
	LastJob string
}

// GetSchedule returns tenant's schedule name; found is false when there
// is none.
func (s *Store) GetSchedule(ctx context.Context, tenant, name string) (rec ScheduleRecord, found bool, err error) {
	h, err := s.rdb.HGetAll(ctx, s.keys.Schedule(tenant, name)).Result()
	if err != nil {
		return ScheduleRecord{}, false, fmt.Errorf("store: get schedule %s: %w", name, err)
	}
	if len(h) == 0 {
		return ScheduleRecord{}, false, nil
	}
	rec, err = scheduleRecord(tenant, h)
	return rec, err == nil, err
}

// SchedulePage is a page of a tenant's schedules, by name.
type SchedulePage struct {
	Records []ScheduleRecord
	// After is the name the next page starts after; "" when this page is
	// the last.
	After string
}

// ListSchedules returns up to limit (at least 1) of tenant's schedules
// whose names sort after after ("" = from the first). It reads the names
// first, then the records in one pipeline; a schedule deleted between the
// two is left out.
func (s *Store) ListSchedules(ctx context.Context, tenant, after string, limit int) (SchedulePage, error) {
	from := "-"
	if after != "" {
		from = "(" + after
	}
	// One name more than the page tells whether another page follows.
	names, err := s.rdb.ZRangeArgs(ctx, redis.ZRangeArgs{Key: s.keys.TenantSchedules(tenant),
		Start: from, Stop: "+", ByLex: true, Count: int64(limit + 1)}).Result()
	if err != nil {
		return SchedulePage{}, fmt.Errorf("store: list schedules: %w", err)
	}
	var page SchedulePage
	if len(names) > limit {
		names = names[:limit]
		page.After = names[limit-1]
	}
	cmds := make([]*redis.MapStringStringCmd, len(names))
	if _, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, n := range names {
			cmds[i] = p.HGetAll(ctx, s.keys.Schedule(tenant, n))
		}
		return nil
	}); err != nil {
		return SchedulePage{}, fmt.Errorf("store: list schedules: %w", err)
	}
	page.Records = make([]ScheduleRecord, 0, len(names))
	for _, c := range cmds {
		if len(c.Val()) == 0 {
			continue // deleted since the names were read
		}
		rec, err := scheduleRecord(tenant, c.Val())
		if err != nil {
			return SchedulePage{}, err
		}
		page.Records = append(page.Records, rec)
	}
	return page, nil
}

// ScheduleTime reads the Redis clock, to the millisecond: the clock every
// schedule's due times are kept in.
func (s *Store) ScheduleTime(ctx context.Context) (time.Time, error) {
	t, err := s.rdb.Time(ctx).Result()
	if err != nil {
		return time.Time{}, fmt.Errorf("store: redis time: %w", err)
	}
	return t.UTC().Truncate(time.Millisecond), nil
}

// scheduleReply reads a record that a script returned as HGETALL's flat
// list.
func scheduleReply(tenant string, v any) (ScheduleRecord, error) {
	flat, ok := v.([]any)
	if !ok || len(flat)%2 != 0 {
		return ScheduleRecord{}, fmt.Errorf("store: schedule: unexpected script reply %T", v)
	}
	h := make(map[string]string, len(flat)/2)
	for i := 0; i < len(flat); i += 2 {
		k, _ := flat[i].(string)
		h[k], _ = flat[i+1].(string)
	}
	return scheduleRecord(tenant, h)
}

// scheduleRecord reads a schedule's hash: the one place that knows how
// its fields are encoded.
func scheduleRecord(tenant string, h map[string]string) (ScheduleRecord, error) {
	rec := ScheduleRecord{Tenant: tenant, Name: h["name"], Spec: h["spec"], Gen: h["gen"], Paused: h["paused"] == "1",
		LastJob: h["last_job"]}
	var err error
	ms := func(field string) time.Time {
		n, perr := strconv.ParseInt(h[field], 10, 64)
		if perr != nil && err == nil {
			err = fmt.Errorf("store: schedule record %s: %s: %w", rec.Name, field, perr)
		}
		return time.UnixMilli(n).UTC()
	}
	rec.Next = ms("next")
	rec.Created = ms("created")
	if h["last_run"] != "" {
		rec.LastRun = ms("last_run")
	}
	return rec, err
}
