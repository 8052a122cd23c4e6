package store

import (
	"context"
	"fmt"
	"time"

	"github.com/leasehold/leasehold/internal/store/scripts"
)

// transitionLib is transition.lua (redis_now, int, record, the
// delivery's steps) with the libraries it needs.
var transitionLib = []string{"stats.lua", "finished.lua", "states.lua", "transition.lua"}

var (
	scheduleCreateScript = scripts.Load("schedule_create.lua", transitionLib...)
	scheduleUpdateScript = scripts.Load("schedule_update.lua")
	schedulePauseScript  = scripts.Load("schedule_pause.lua")
	scheduleDeleteScript = scripts.Load("schedule_delete.lua")
)

// ScheduleWrite is a schedule's spec as Create and Update write it.
type ScheduleWrite struct {
	Tenant, Name string
	Spec         string    // canonical JSON
	Gen          string    // a fresh id: the new generation, and the call's nonce
	Next         time.Time // the first due time
}

// CreateScheduleParams is a schedule to create.
type CreateScheduleParams struct {
	ScheduleWrite
	// Max is the most schedules the tenant may have: a new name past it
	// is refused.
	Max int
}

// CreateScheduleResult is what CreateSchedule did.
type CreateScheduleResult struct {
	// Created: this call made the schedule (a resent call that had made it
	// too). Otherwise Record is the schedule that had the name already.
	Created bool
	Record  ScheduleRecord
	// OverCap: the name is new and the tenant has Schedules schedules,
	// Max or more; nothing was written.
	OverCap   bool
	Schedules int64
}

// CreateSchedule creates p's schedule unless one of its name exists,
// counting the tenant's schedules in the same script that adds the name,
// so that API processes creating at once cannot pass the cap together.
func (s *Store) CreateSchedule(ctx context.Context, p CreateScheduleParams) (CreateScheduleResult, error) {
	res, err := scheduleCreateScript.Run(ctx, s.rdb,
		[]string{s.keys.Schedule(p.Tenant, p.Name), s.keys.ScheduleTenantDue(p.Tenant), s.keys.TenantSchedules(p.Tenant), s.keys.ScheduleTenants()},
		p.Tenant, p.Name, p.Spec, p.Gen, p.Next.UnixMilli(), p.Max).Slice()
	if err == nil && len(res) != 2 {
		err = fmt.Errorf("%d values in the reply, want 2", len(res))
	}
	if err != nil {
		return CreateScheduleResult{}, fmt.Errorf("store: create schedule %s: %w", p.Name, err)
	}
	if res[0] == int64(-1) {
		n, _ := res[1].(int64)
		return CreateScheduleResult{OverCap: true, Schedules: n}, nil
	}
	rec, err := scheduleReply(p.Tenant, res[1])
	return CreateScheduleResult{Created: res[0] == int64(1), Record: rec}, err
}

// UpdateSchedule replaces the spec of an existing schedule and moves its
// next due time to p.Next, keeping its history (created, paused, the last
// run and job); found is false when there is no such schedule.
func (s *Store) UpdateSchedule(ctx context.Context, p ScheduleWrite) (rec ScheduleRecord, found bool, err error) {
	res, err := scheduleUpdateScript.Run(ctx, s.rdb,
		[]string{s.keys.Schedule(p.Tenant, p.Name), s.keys.ScheduleTenantDue(p.Tenant), s.keys.ScheduleTenants()},
		p.Tenant, p.Name, p.Spec, p.Gen, p.Next.UnixMilli()).Slice()
	if err != nil {
		return ScheduleRecord{}, false, fmt.Errorf("store: update schedule %s: %w", p.Name, err)
	}
	if len(res) == 0 {
		return ScheduleRecord{}, false, nil
	}
	rec, err = scheduleReply(p.Tenant, res)
	return rec, err == nil, err
}

// PauseScheduleParams pauses or resumes a schedule.
type PauseScheduleParams struct {
	Tenant, Name string
	Paused       bool
	// Next is a resumed schedule's next due time; unused when pausing.
	Next time.Time
}

// PauseSchedule pauses or resumes a schedule; found is false when there is
// no such schedule.
func (s *Store) PauseSchedule(ctx context.Context, p PauseScheduleParams) (rec ScheduleRecord, found bool, err error) {
	flag, next := "1", int64(0)
	if !p.Paused {
		flag, next = "0", p.Next.UnixMilli()
	}
	res, err := schedulePauseScript.Run(ctx, s.rdb, []string{s.keys.Schedule(p.Tenant, p.Name), s.keys.ScheduleTenantDue(p.Tenant), s.keys.ScheduleTenants()},
		p.Name, flag, next, p.Tenant).Slice()
	if err != nil {
		return ScheduleRecord{}, false, fmt.Errorf("store: pause schedule %s: %w", p.Name, err)
	}
	if len(res) == 0 {
		return ScheduleRecord{}, false, nil
	}
	rec, err = scheduleReply(p.Tenant, res)
	return rec, err == nil, err
}

// DeleteSchedule deletes tenant's schedule name; found is false when there
// was none.
func (s *Store) DeleteSchedule(ctx context.Context, tenant, name string) (found bool, err error) {
	n, err := scheduleDeleteScript.Run(ctx, s.rdb,
		[]string{s.keys.Schedule(tenant, name), s.keys.ScheduleTenantDue(tenant), s.keys.TenantSchedules(tenant)},
		name).Int()
	if err != nil {
		return false, fmt.Errorf("store: delete schedule %s: %w", name, err)
	}
	return n > 0, nil
}
