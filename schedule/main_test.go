package schedule_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/store"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/internal/store/keys"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/job"
	"github.com/leasehold/leasehold/schedule"
)

func TestMain(m *testing.M) { testenv.Main(m, nil) }

// fixture is a schedule Store and its job Store on a key prefix of their own.
type fixture struct {
	rdb    redis.UniversalClient
	store  *schedule.Store
	jobs   *store.Store
	keys   keys.Space
	prefix string
}

func newFixture(t testing.TB, rdb redis.UniversalClient) fixture {
	t.Helper()
	prefix := testenv.Prefix(t)
	jobs := store.New(rdb, store.Config{Prefix: prefix})
	s, err := schedule.NewStore(rdb, schedule.Config{Prefix: prefix, Jobs: jobs})
	if err != nil {
		t.Fatal(err)
	}
	return fixture{rdb: rdb, store: s, jobs: jobs, keys: keys.New(prefix), prefix: prefix}
}

// scheduler returns a Scheduler of fx's schedules on its own Redis client.
func (fx fixture) scheduler(t testing.TB, rdb redis.UniversalClient, cfg schedule.SchedulerConfig) *schedule.Scheduler {
	t.Helper()
	st := fx.store
	if rdb != nil {
		var err error
		if st, err = schedule.NewStore(rdb, schedule.Config{Prefix: fx.prefix}); err != nil {
			t.Fatal(err)
		}
	}
	s, err := schedule.NewScheduler(st, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func (fx fixture) create(t testing.TB, tenant string, spec schedule.Spec) schedule.Schedule {
	t.Helper()
	sch, created, err := fx.store.Create(context.Background(), tenant, spec)
	if err != nil || !created {
		t.Fatalf("create %s: created %v, %v", spec.Name, created, err)
	}
	return sch
}

// dueAt moves tenant's schedule name's next due time to at, as if it had
// been due since then with nothing running.
func (fx fixture) dueAt(t testing.TB, tenant, name string, at time.Time) {
	t.Helper()
	ctx := context.Background()
	ms := at.UnixMilli()
	if err := fx.rdb.HSet(ctx, fx.keys.Schedule(tenant, name), "next", ms).Err(); err != nil {
		t.Fatal(err)
	}
	if err := fx.rdb.ZAdd(ctx, fx.keys.ScheduleTenantDue(tenant), redis.Z{Score: float64(ms), Member: name}).Err(); err != nil {
		t.Fatal(err)
	}
	if err := fx.rdb.ZAddLT(ctx, fx.keys.ScheduleTenants(), redis.Z{Score: float64(ms), Member: tenant}).Err(); err != nil {
		t.Fatal(err)
	}
}

// jobs returns tenant's jobs, oldest first.
func (fx fixture) jobsOf(t testing.TB, tenant string) []job.Job {
	t.Helper()
	var all []job.Job
	cursor := ""
	for {
		page, next, err := fx.jobs.List(context.Background(), job.ListQuery{Tenant: tenant, Limit: 500, Cursor: cursor})
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, page...)
		if next == "" {
			break
		}
		cursor = next
	}
	for i, j := 0, len(all)-1; i < j; i, j = i+1, j-1 {
		all[i], all[j] = all[j], all[i]
	}
	return all
}

// scheduledFor reads a fired job's metadata.scheduled_for.
func scheduledFor(t testing.TB, j job.Job) time.Time {
	t.Helper()
	var m struct {
		ScheduledFor time.Time `json:"scheduled_for"`
	}
	if err := json.Unmarshal(j.Metadata, &m); err != nil || m.ScheduledFor.IsZero() {
		t.Fatalf("job %s: metadata %s has no scheduled_for (%v)", j.ID, j.Metadata, err)
	}
	return m.ScheduledFor
}

func redisNow(t testing.TB, rdb redis.UniversalClient) time.Time {
	t.Helper()
	now, err := rdb.Time(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	return now
}

func every(name, d string) schedule.Spec {
	return schedule.Spec{Name: name, Cron: "@every " + d, Job: job.Submission{Kind: "echo", Input: json.RawMessage(`{"n":1}`)}}
}
