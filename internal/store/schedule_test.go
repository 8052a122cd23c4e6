package store

import (
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/testenv"
)

func ownRedisStore(t *testing.T) *Store {
	t.Helper()
	return New(testenv.StartRedis(t).Client(t), Config{Prefix: "sched:"})
}

// A schedule's record reads back as written, through every write: create
// (and its cap), get, list by pages, pause, resume, update and delete.
func TestScheduleRecordThroughItsWrites(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := ownRedisStore(t)
	now, err := s.ScheduleTime(ctx)
	if err != nil {
		t.Fatal(err)
	}
	next := now.Add(time.Hour)
	w := ScheduleWrite{Tenant: "acme", Name: "a", Spec: `{"name":"a"}`, Gen: "g1", Next: next}
	res, err := s.CreateSchedule(ctx, CreateScheduleParams{ScheduleWrite: w, Max: 2})
	if err != nil || !res.Created {
		t.Fatalf("create: %+v, %v", res, err)
	}
	if r := res.Record; r.Tenant != "acme" || r.Name != "a" || r.Spec != w.Spec || r.Gen != "g1" || r.Paused ||
		!r.Next.Equal(next) || r.Created.Before(now) || !r.LastRun.IsZero() || r.LastJob != "" {
		t.Fatalf("created record %+v", r)
	}
	// The same name again, another call: not created, the first's record.
	again := w
	again.Gen, again.Spec = "g2", `{"name":"a","other":1}`
	if res, err := s.CreateSchedule(ctx, CreateScheduleParams{ScheduleWrite: again, Max: 2}); err != nil || res.Created || res.Record.Gen != "g1" {
		t.Fatalf("create again: %+v, %v", res, err)
	}
	b := ScheduleWrite{Tenant: "acme", Name: "b", Spec: `{"name":"b"}`, Gen: "g3", Next: next}
	if res, err := s.CreateSchedule(ctx, CreateScheduleParams{ScheduleWrite: b, Max: 2}); err != nil || !res.Created {
		t.Fatalf("create b: %+v, %v", res, err)
	}
	c := ScheduleWrite{Tenant: "acme", Name: "c", Spec: `{"name":"c"}`, Gen: "g4", Next: next}
	if res, err := s.CreateSchedule(ctx, CreateScheduleParams{ScheduleWrite: c, Max: 2}); err != nil || !res.OverCap || res.Schedules != 2 {
		t.Fatalf("create past the cap: %+v, %v", res, err)
	}
	if _, found, err := s.GetSchedule(ctx, "acme", "c"); err != nil || found {
		t.Fatalf("a schedule refused by the cap: found %v, %v", found, err)
	}

	page, err := s.ListSchedules(ctx, "acme", "", 1)
	if err != nil || len(page.Records) != 1 || page.Records[0].Name != "a" || page.After != "a" {
		t.Fatalf("first page: %+v, %v", page, err)
	}
	page, err = s.ListSchedules(ctx, "acme", page.After, 1)
	if err != nil || len(page.Records) != 1 || page.Records[0].Name != "b" || page.After != "" {
		t.Fatalf("second page: %+v, %v", page, err)
	}

	rec, found, err := s.PauseSchedule(ctx, PauseScheduleParams{Tenant: "acme", Name: "a", Paused: true})
	if err != nil || !found || !rec.Paused {
		t.Fatalf("pause: %+v, %v, %v", rec, found, err)
	}
	later := next.Add(time.Hour)
	rec, found, err = s.PauseSchedule(ctx, PauseScheduleParams{Tenant: "acme", Name: "a", Next: later})
	if err != nil || !found || rec.Paused || !rec.Next.Equal(later) {
		t.Fatalf("resume: %+v, %v, %v", rec, found, err)
	}
	upd := ScheduleWrite{Tenant: "acme", Name: "a", Spec: `{"name":"a","v":2}`, Gen: "g5", Next: next}
	rec, found, err = s.UpdateSchedule(ctx, upd)
	if err != nil || !found || rec.Spec != upd.Spec || !rec.Next.Equal(next) {
		t.Fatalf("update: %+v, %v, %v", rec, found, err)
	}
	if _, found, err := s.UpdateSchedule(ctx, ScheduleWrite{Tenant: "acme", Name: "zz", Spec: "{}", Gen: "g6", Next: next}); err != nil || found {
		t.Fatalf("update of no schedule: found %v, %v", found, err)
	}
	if found, err := s.DeleteSchedule(ctx, "acme", "a"); err != nil || !found {
		t.Fatalf("delete: %v, %v", found, err)
	}
	if found, err := s.DeleteSchedule(ctx, "acme", "a"); err != nil || found {
		t.Fatalf("delete again: %v, %v", found, err)
	}
	if _, found, err := s.PauseSchedule(ctx, PauseScheduleParams{Tenant: "acme", Name: "a", Paused: true}); err != nil || found {
		t.Fatalf("pause of a deleted schedule: found %v, %v", found, err)
	}
}

// A due schedule is taken once while held; advancing it records its job
// and moves it on, once per due time.
func TestTakeDueSchedulesAndAdvance(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := ownRedisStore(t)
	now, err := s.ScheduleTime(ctx)
	if err != nil {
		t.Fatal(err)
	}
	due := now.Add(-time.Second)
	w := ScheduleWrite{Tenant: "acme", Name: "tick", Spec: "{}", Gen: "g1", Next: due}
	if _, err := s.CreateSchedule(ctx, CreateScheduleParams{ScheduleWrite: w, Max: 10}); err != nil {
		t.Fatal(err)
	}
	taken, err := s.TakeDueSchedules(ctx, 10, time.Minute)
	if err != nil || len(taken.Due) != 1 || taken.Due[0] != (ScheduleRef{"acme", "tick"}) || taken.Now.Before(now) {
		t.Fatalf("take: %+v, %v", taken, err)
	}
	if again, err := s.TakeDueSchedules(ctx, 10, time.Minute); err != nil || len(again.Due) != 0 {
		t.Fatalf("take while held: %+v, %v", again, err)
	}
	next := now.Add(time.Hour)
	p := AdvanceScheduleParams{Tenant: "acme", Name: "tick", Gen: "g1", Fired: due, Next: next, Look: next,
		JobID: "job-1", JobQueue: "default", Outcome: "fired"}
	if changed, err := s.AdvanceSchedule(ctx, p); err != nil || !changed {
		t.Fatalf("advance: changed %v, %v", changed, err)
	}
	// A second scheduler that fired the same due time moves nothing.
	if changed, err := s.AdvanceSchedule(ctx, p); err != nil || changed {
		t.Fatalf("advance again: changed %v, %v", changed, err)
	}
	rec, _, err := s.GetSchedule(ctx, "acme", "tick")
	if err != nil || !rec.Next.Equal(next) || !rec.LastRun.Equal(due) || rec.LastJob != "job-1" {
		t.Fatalf("after the advance: %+v, %v", rec, err)
	}
	if fired, err := s.ScheduleFired(ctx, "acme", "no-such-key"); err != nil || fired {
		t.Fatalf("fired under an unused key: %v, %v", fired, err)
	}
}

// A record whose fields do not parse is an error, not a zero time.
func TestScheduleRecordMalformed(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := ownRedisStore(t)
	if err := s.rdb.HSet(ctx, s.keys.Schedule("acme", "bad"), "name", "bad", "spec", "{}", "next", "soon", "created", "1").Err(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.GetSchedule(ctx, "acme", "bad"); err == nil {
		t.Fatal("a record with next \"soon\" read without an error")
	}
}
