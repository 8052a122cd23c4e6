package schedule_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/job"
	"github.com/leasehold/leasehold/schedule"
)

// The time-zone behaviour is robfig/cron's, as docs/architecture.md
// states it: in Europe/Berlin, 02:30 does not exist on 2026-03-29 (clocks
// spring from 02:00 to 03:00) and is not fired that day; it happens twice
// on 2026-10-25 (clocks fall back from 03:00 to 02:00) and is fired twice.
func TestNextAcrossDSTInBerlin(t *testing.T) {
	t.Parallel()
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	at := func(s string) time.Time {
		v, err := time.ParseInLocation("2006-01-02 15:04 -0700", s, berlin)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	for _, c := range []struct {
		cron, from string
		want       []string
	}{
		{"30 2 * * *", "2026-03-28 03:00 +0100", []string{"2026-03-30 02:30 +0200", "2026-03-31 02:30 +0200"}},
		{"0 * * * *", "2026-03-29 00:30 +0100", []string{"2026-03-29 01:00 +0100", "2026-03-29 03:00 +0200", "2026-03-29 04:00 +0200"}},
		{"30 2 * * *", "2026-10-24 03:00 +0200", []string{"2026-10-25 02:30 +0200", "2026-10-25 02:30 +0100", "2026-10-26 02:30 +0100"}},
		{"0 3 * * *", "2026-03-28 04:00 +0100", []string{"2026-03-29 03:00 +0200", "2026-03-30 03:00 +0200"}},
		{"@daily", "2026-10-24 12:00 +0200", []string{"2026-10-25 00:00 +0200", "2026-10-26 00:00 +0100"}},
	} {
		from := at(c.from)
		for _, w := range c.want {
			next, err := schedule.Next(c.cron, "Europe/Berlin", from)
			if err != nil {
				t.Fatal(err)
			}
			if want := at(w); !next.Equal(want) {
				t.Fatalf("%s after %s: %s, want %s", c.cron, from.In(berlin), next.In(berlin), want)
			}
			from = next
		}
	}
}

func TestCreateRefusesBadFieldsNamingThem(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, testenv.Redis(t).Client(t))
	ctx := context.Background()
	for _, c := range []struct {
		spec  schedule.Spec
		field string
	}{
		{schedule.Spec{Name: "a", Cron: "61 * * * *", Job: job.Submission{Kind: "echo"}}, "cron"},
		{schedule.Spec{Name: "a", Cron: "* * * * * *", Job: job.Submission{Kind: "echo"}}, "cron"},
		{schedule.Spec{Name: "a", Cron: "@every 500ms", Job: job.Submission{Kind: "echo"}}, "cron"},
		{schedule.Spec{Name: "a", Cron: "CRON_TZ=UTC 0 * * * *", Job: job.Submission{Kind: "echo"}}, "cron"},
		{schedule.Spec{Name: "a", Cron: "@hourly", Timezone: "Mars/Olympus", Job: job.Submission{Kind: "echo"}}, "timezone"},
		{schedule.Spec{Name: "a", Cron: "@hourly", Timezone: "Local", Job: job.Submission{Kind: "echo"}}, "timezone"},
		{schedule.Spec{Name: "A", Cron: "@hourly", Job: job.Submission{Kind: "echo"}}, "name"},
		{schedule.Spec{Name: "a", Cron: "@hourly", Overlap: "queue", Job: job.Submission{Kind: "echo"}}, "overlap"},
		{schedule.Spec{Name: "a", Cron: "@hourly", Job: job.Submission{}}, "job.kind"},
	} {
		_, _, err := fx.store.Create(ctx, "acme", c.spec)
		var invalid *job.ValidationError
		if !errors.As(err, &invalid) || !slices.ContainsFunc(invalid.Errors, func(f job.FieldError) bool { return f.Field == c.field }) {
			t.Fatalf("%+v: %v, want a ValidationError naming %s", c.spec, err, c.field)
		}
	}
	if got, _, err := fx.store.List(ctx, "acme", 0, ""); err != nil || len(got) != 0 {
		t.Fatalf("after refusals: %d schedules, %v", len(got), err)
	}
}

func TestCreateSameNameIdenticalOrConflictAndTenantsApart(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, testenv.Redis(t).Client(t))
	ctx := context.Background()
	spec := schedule.Spec{Name: "nightly", Cron: "0 3 * * *", Timezone: "Europe/Berlin", Job: job.Submission{Kind: "echo"}, Overlap: schedule.OverlapSkip}
	first := fx.create(t, "acme", spec)
	if first.NextRunAt == nil || first.NextRunAt.Before(time.Now()) || first.Paused {
		t.Fatalf("created %+v", first)
	}
	again, created, err := fx.store.Create(ctx, "acme", spec)
	if err != nil || created || !again.CreatedAt.Equal(first.CreatedAt) {
		t.Fatalf("identical again: created %v, %v", created, err)
	}
	other := spec
	other.Cron = "0 4 * * *"
	if _, _, err := fx.store.Create(ctx, "acme", other); !errors.Is(err, schedule.ErrExists) {
		t.Fatalf("other spec, same name: %v, want ErrExists", err)
	}
	if _, err := fx.store.Get(ctx, "globex", "nightly"); !errors.Is(err, schedule.ErrNotFound) {
		t.Fatalf("another tenant's get: %v", err)
	}
	if err := fx.store.Delete(ctx, "globex", "nightly"); !errors.Is(err, schedule.ErrNotFound) {
		t.Fatalf("another tenant's delete: %v", err)
	}
	if _, err := fx.store.Pause(ctx, "globex", "nightly"); !errors.Is(err, schedule.ErrNotFound) {
		t.Fatalf("another tenant's pause: %v", err)
	}
	fx.create(t, "globex", other) // names are per tenant
	if err := fx.store.Delete(ctx, "acme", "nightly"); err != nil {
		t.Fatal(err)
	}
	if _, err := fx.store.Get(ctx, "acme", "nightly"); !errors.Is(err, schedule.ErrNotFound) {
		t.Fatalf("after delete: %v", err)
	}
	if n, _ := fx.rdb.ZCard(ctx, fx.keys.ScheduleTenantDue("acme")).Result(); n != 0 {
		t.Fatalf("acme's due index holds %d after the delete, want 0", n)
	}
	if n, _ := fx.rdb.ZCard(ctx, fx.keys.ScheduleTenantDue("globex")).Result(); n != 1 {
		t.Fatalf("globex's due index holds %d, want 1", n)
	}
}

// One read of the due index fires what is due, once: the job carries the
// schedule's name and its due time, and the schedule moves past now.
func TestRunOnceFiresWhatIsDue(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, testenv.Redis(t).Client(t))
	ctx := context.Background()
	fx.create(t, "acme", every("tick", "1h"))
	s := fx.scheduler(t, nil, schedule.SchedulerConfig{})
	if n, err := s.RunOnce(ctx); err != nil || n != 0 {
		t.Fatalf("nothing due: took %d, %v", n, err)
	}
	due := redisNow(t, fx.rdb).Add(-time.Second).Truncate(time.Millisecond)
	fx.dueAt(t, "acme", "tick", due)
	if n, err := s.RunOnce(ctx); err != nil || n != 1 {
		t.Fatalf("due: took %d, %v", n, err)
	}
	jobs := fx.jobsOf(t, "acme")
	if len(jobs) != 1 {
		t.Fatalf("%d jobs, want 1", len(jobs))
	}
	if j := jobs[0]; j.Schedule == nil || *j.Schedule != "tick" || !scheduledFor(t, j).Equal(due) {
		t.Fatalf("job %+v: want schedule tick, scheduled_for %s", j, due)
	}
	sch, err := fx.store.Get(ctx, "acme", "tick")
	if err != nil {
		t.Fatal(err)
	}
	if sch.LastJobID == nil || *sch.LastJobID != jobs[0].ID || !sch.LastRunAt.Equal(due) || !sch.NextRunAt.After(time.Now().Add(59*time.Minute)) {
		t.Fatalf("after the fire: %+v", sch)
	}
	if n, err := s.RunOnce(ctx); err != nil || n != 0 || len(fx.jobsOf(t, "acme")) != 1 {
		t.Fatalf("read again: took %d, %v", n, err)
	}
}

// Due times missed while nothing ran (here ten of @every 1s) are one fire
// at recovery, for the first of them.
func TestMissedDueTimesCollapseIntoOneFire(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, testenv.Redis(t).Client(t))
	ctx := context.Background()
	fx.create(t, "acme", every("tick", "1s"))
	if _, err := fx.store.Pause(ctx, "acme", "tick"); err != nil { // nothing fires while we set it up
		t.Fatal(err)
	}
	if err := fx.rdb.HSet(ctx, fx.keys.Schedule("acme", "tick"), "paused", "0").Err(); err != nil {
		t.Fatal(err)
	}
	stopped := redisNow(t, fx.rdb).Add(-10 * time.Second).Truncate(time.Second)
	fx.dueAt(t, "acme", "tick", stopped)
	s := fx.scheduler(t, nil, schedule.SchedulerConfig{})
	before := redisNow(t, fx.rdb)
	if _, err := s.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	jobs := fx.jobsOf(t, "acme")
	if len(jobs) != 1 || !scheduledFor(t, jobs[0]).Equal(stopped) {
		t.Fatalf("%d jobs after ten missed due times, want one for %s", len(jobs), stopped)
	}
	// The nine other missed due times are gone: the next is after the fire.
	sch, _ := fx.store.Get(ctx, "acme", "tick")
	if !sch.NextRunAt.After(before) {
		t.Fatalf("next_run_at %s is not past the outage (the fire ran after %s)", sch.NextRunAt, before)
	}
}

// Any number of schedulers firing one due time at once make one job; so
// does a fire after one that died between its two steps.
func TestConcurrentFiresOfOneDueTimeMakeOneJob(t *testing.T) {
	t.Parallel()
	r := testenv.Redis(t)
	fx := newFixture(t, r.Client(t))
	ctx := context.Background()
	fx.create(t, "acme", every("tick", "1h"))
	due := redisNow(t, fx.rdb).Add(-time.Second).Truncate(time.Millisecond)
	fx.dueAt(t, "acme", "tick", due)

	// A fire that created the job and died before it moved the schedule on.
	crashed, err := fx.store.SubmitOnly(ctx, "acme", "tick")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	results := make(chan schedule.Result, 8)
	for range 8 {
		st := fx.storeOn(t, r.Client(t))
		wg.Go(func() {
			res, err := st.Fire(ctx, "acme", "tick", redisNow(t, fx.rdb), schedule.Limits{})
			if err != nil {
				t.Error(err)
			}
			results <- res
		})
	}
	wg.Wait()
	close(results)
	for res := range results {
		if res.Outcome == schedule.Fired && (res.Created || res.Job.ID != crashed.ID) {
			t.Fatalf("a fire made job %s (created %v); the crashed fire's was %s", res.Job.ID, res.Created, crashed.ID)
		}
	}
	if jobs := fx.jobsOf(t, "acme"); len(jobs) != 1 || jobs[0].ID != crashed.ID {
		t.Fatalf("%d jobs, want the one the crashed fire made", len(jobs))
	}
	sch, _ := fx.store.Get(ctx, "acme", "tick")
	if sch.LastJobID == nil || *sch.LastJobID != crashed.ID || !sch.NextRunAt.After(time.Now()) {
		t.Fatalf("after the fires: %+v", sch)
	}
}

func TestPauseResumeTrigger(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, testenv.Redis(t).Client(t))
	ctx := context.Background()
	fx.create(t, "acme", every("tick", "1h"))
	paused, err := fx.store.Pause(ctx, "acme", "tick")
	if err != nil || !paused.Paused || paused.NextRunAt != nil {
		t.Fatalf("pause: %+v, %v", paused, err)
	}
	// Due while paused: no fire.
	fx.dueAt(t, "acme", "tick", redisNow(t, fx.rdb).Add(-time.Second))
	s := fx.scheduler(t, nil, schedule.SchedulerConfig{})
	if _, err := s.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if jobs := fx.jobsOf(t, "acme"); len(jobs) != 0 {
		t.Fatalf("a paused schedule fired %d jobs", len(jobs))
	}
	// A trigger fires a paused schedule, now, and leaves it paused.
	j, err := fx.store.Trigger(ctx, "acme", "tick", job.Cap{})
	if err != nil || j.Schedule == nil || *j.Schedule != "tick" {
		t.Fatalf("trigger: %+v, %v", j, err)
	}
	sch, _ := fx.store.Get(ctx, "acme", "tick")
	if !sch.Paused || sch.LastJobID == nil || *sch.LastJobID != j.ID {
		t.Fatalf("after trigger: %+v", sch)
	}
	resumed, err := fx.store.Resume(ctx, "acme", "tick")
	if err != nil || resumed.Paused || resumed.NextRunAt == nil || !resumed.NextRunAt.After(time.Now().Add(59*time.Minute)) {
		t.Fatalf("resume: %+v, %v", resumed, err)
	}
	if _, err := s.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if jobs := fx.jobsOf(t, "acme"); len(jobs) != 1 {
		t.Fatalf("resume fired the due time that passed while paused: %d jobs", len(jobs))
	}
}

// A fire over the tenant's cap waits for room; when it fires, the due
// times that passed meanwhile collapse into it.
func TestFireOverTheCapIsDeferred(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, testenv.Redis(t).Client(t))
	ctx := context.Background()
	fx.create(t, "acme", every("tick", "1h"))
	blocker, _, err := fx.jobs.Submit(ctx, "acme", job.Submission{Kind: "echo"}, "")
	if err != nil {
		t.Fatal(err)
	}
	due := redisNow(t, fx.rdb).Add(-time.Second).Truncate(time.Millisecond)
	fx.dueAt(t, "acme", "tick", due)
	limits := schedule.Limits{Cap: job.Cap{Max: 1}}
	res, err := fx.store.Fire(ctx, "acme", "tick", redisNow(t, fx.rdb), limits)
	if err != nil || res.Outcome != schedule.Deferred {
		t.Fatalf("over the cap: %+v, %v", res, err)
	}
	if sch, _ := fx.store.Get(ctx, "acme", "tick"); !sch.NextRunAt.Equal(due) {
		t.Fatalf("a deferred fire moved next_run_at to %s", sch.NextRunAt)
	}
	if _, err := fx.jobs.Cancel(ctx, "acme", blocker.ID, false); err != nil {
		t.Fatal(err)
	}
	res, err = fx.store.Fire(ctx, "acme", "tick", redisNow(t, fx.rdb), limits)
	if err != nil || res.Outcome != schedule.Fired || !scheduledFor(t, *res.Job).Equal(due) {
		t.Fatalf("with room: %+v, %v", res, err)
	}
}

// overlap "skip" fires no job while the last one has not ended.
func TestOverlapSkip(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, testenv.Redis(t).Client(t))
	ctx := context.Background()
	spec := every("tick", "1h")
	spec.Overlap = schedule.OverlapSkip
	fx.create(t, "acme", spec)
	fire := func(want schedule.Outcome) {
		t.Helper()
		fx.dueAt(t, "acme", "tick", redisNow(t, fx.rdb).Add(-time.Second))
		res, err := fx.store.Fire(ctx, "acme", "tick", redisNow(t, fx.rdb), schedule.Limits{})
		if err != nil || res.Outcome != want {
			t.Fatalf("fire: %+v, %v; want %s", res, err, want)
		}
	}
	fire(schedule.Fired)
	fire(schedule.Skipped) // the first job is still queued: no worker runs here
	first := fx.jobsOf(t, "acme")[0]
	if _, err := fx.jobs.Cancel(ctx, "acme", first.ID, false); err != nil {
		t.Fatal(err)
	}
	fire(schedule.Fired)
	if jobs := fx.jobsOf(t, "acme"); len(jobs) != 2 {
		t.Fatalf("%d jobs, want 2", len(jobs))
	}
}

// The second step of a fire is a compare-and-set: a scheduler that fired a
// due time the schedule has since moved past does not move it back.
func TestAStaleFireDoesNotMoveTheScheduleBack(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, testenv.Redis(t).Client(t))
	ctx := context.Background()
	fx.create(t, "acme", every("tick", "1h"))
	due := redisNow(t, fx.rdb).Add(-time.Second).Truncate(time.Millisecond)
	fx.dueAt(t, "acme", "tick", due)
	if res, err := fx.store.Fire(ctx, "acme", "tick", redisNow(t, fx.rdb), schedule.Limits{}); err != nil || res.Outcome != schedule.Fired {
		t.Fatalf("fire: %+v, %v", res, err)
	}
	moved, _ := fx.store.Get(ctx, "acme", "tick")
	if err := fx.store.AdvanceStale(ctx, "acme", "tick", due, due.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	after, _ := fx.store.Get(ctx, "acme", "tick")
	if !after.NextRunAt.Equal(*moved.NextRunAt) {
		t.Fatalf("a stale fire moved next_run_at from %s to %s", moved.NextRunAt, after.NextRunAt)
	}
	if score, _ := fx.rdb.ZScore(ctx, fx.keys.ScheduleTenantDue("acme"), "tick").Result(); int64(score) != moved.NextRunAt.UnixMilli() {
		t.Fatalf("due index at %v, want %v", score, moved.NextRunAt.UnixMilli())
	}
}

// Update replaces a schedule's spec and keeps its history (created_at,
// paused, last run and job); its next run follows the new cron, and the
// next fire creates the new spec's job.
func TestUpdateKeepsHistoryAndFiresTheNewSpec(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, testenv.Redis(t).Client(t))
	ctx := context.Background()
	created := fx.create(t, "acme", every("tick", "1h"))
	if _, err := fx.store.Pause(ctx, "acme", "tick"); err != nil {
		t.Fatal(err)
	}
	last, err := fx.store.Trigger(ctx, "acme", "tick", job.Cap{})
	if err != nil {
		t.Fatal(err)
	}
	before, _ := fx.store.Get(ctx, "acme", "tick")

	spec := every("tick", "1m")
	spec.Timezone, spec.Overlap = "Europe/Berlin", schedule.OverlapSkip
	spec.Job.Input = json.RawMessage(`{"n":2}`)
	got, err := fx.store.Update(ctx, "acme", spec)
	if err != nil {
		t.Fatal(err)
	}
	if got.Cron != "@every 1m" || got.Timezone != "Europe/Berlin" || got.Overlap != schedule.OverlapSkip ||
		!strings.Contains(string(got.Job.Input), `"n":2`) {
		t.Fatalf("updated spec %+v", got)
	}
	if !got.Paused || got.NextRunAt != nil || !got.CreatedAt.Equal(created.CreatedAt) ||
		got.LastJobID == nil || *got.LastJobID != last.ID || !got.LastRunAt.Equal(*before.LastRunAt) {
		t.Fatalf("history after the update %+v, want it as before %+v", got, before)
	}
	resumed, err := fx.store.Resume(ctx, "acme", "tick")
	if err != nil || resumed.NextRunAt == nil || resumed.NextRunAt.After(redisNow(t, fx.rdb).Add(time.Minute)) {
		t.Fatalf("resumed %+v, %v: want its next run within the new cron's minute", resumed, err)
	}
	// Updated while running: the next run is recomputed at once. (With
	// overlap skip it would not fire: the triggered job has not ended.)
	spec.Cron, spec.Overlap = "@every 1s", schedule.OverlapAllow
	if got, err = fx.store.Update(ctx, "acme", spec); err != nil || got.NextRunAt == nil ||
		got.NextRunAt.After(redisNow(t, fx.rdb).Add(time.Second)) {
		t.Fatalf("update of a running schedule: %+v, %v", got, err)
	}
	fx.dueAt(t, "acme", "tick", redisNow(t, fx.rdb).Add(-time.Second))
	if _, err := fx.scheduler(t, nil, schedule.SchedulerConfig{}).RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	jobs := fx.jobsOf(t, "acme")
	if len(jobs) != 2 {
		t.Fatalf("%d jobs after the fire, want the trigger's and the fire's", len(jobs))
	}
	fired, err := fx.jobs.Get(ctx, "acme", jobs[1].ID, false)
	if err != nil || !strings.Contains(string(fired.Input), `"n":2`) {
		t.Fatalf("the fire after the update created %+v (%v), want the new spec's input", fired, err)
	}

	spec.Name = "nope"
	if _, err := fx.store.Update(ctx, "acme", spec); !errors.Is(err, schedule.ErrNotFound) {
		t.Fatalf("update of a schedule that does not exist: %v, want ErrNotFound", err)
	}
	if _, err := fx.store.Update(ctx, "globex", every("tick", "1m")); !errors.Is(err, schedule.ErrNotFound) {
		t.Fatalf("update of another tenant's schedule: %v, want ErrNotFound", err)
	}
}
