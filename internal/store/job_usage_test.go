package store_test

import (
	"maps"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/store"
	"github.com/leasehold/leasehold/job"
	"github.com/leasehold/leasehold/ratelimit/usage"
)

// The store counts each job it creates in its queue's usage, in the step
// that creates it, on Redis and on a Cluster: a batch over two queues, an
// idempotent replay (counted once), a job refused by the tenant's cap
// (not counted), and another tenant's job, counted for that tenant alone.
// AddUsage adds the queues' counts to what usage.Counters counted (an
// older version's jobs_submitted among them), and the day's counts expire
// at its drop time.
func TestStoreCountsTheJobsItCreates(t *testing.T) {
	t.Parallel()
	eachBackend(t, store.Config{}, func(t *testing.T, fx fixture) {
		ctx := t.Context()
		counters, err := usage.New(store.New(fx.rdb, store.Config{Prefix: fx.prefix}), usage.Config{})
		if err != nil {
			t.Fatal(err)
		}
		items := []job.BatchItem{
			{Submission: job.Submission{Kind: "echo", Queue: "a"}},
			{Submission: job.Submission{Kind: "echo", Queue: "b"}, IdempotencyKey: "once"},
			{Submission: job.Submission{Kind: "echo", Queue: "b"}},
		}
		if _, err := fx.store.SubmitBatch(ctx, "acme", items, job.Cap{}); err != nil {
			t.Fatal(err)
		}
		if _, created, err := fx.store.Submit(ctx, "acme", items[1].Submission, "once"); err != nil || created {
			t.Fatalf("replay: created %v, %v; want the first job", created, err)
		}
		if res, err := fx.store.SubmitBatch(ctx, "acme", items[:1], job.Cap{Max: 1}); err != nil || res[0].Err == nil {
			t.Fatalf("submit past the cap: %+v, %v; want refused", res, err)
		}
		fx.submit(t, "globex", job.Submission{Kind: "echo", Queue: "a"})
		// What an older version counted with a mark adds to the queues'.
		if _, err := counters.Add(ctx, "acme", usage.JobsSubmitted, 1, "an-older-job", time.Now()); err != nil {
			t.Fatal(err)
		}

		for tenant, want := range map[string]map[string]int64{
			"acme":   {usage.JobsSubmitted: 4},
			"globex": {usage.JobsSubmitted: 1},
			"nobody": {},
		} {
			days, err := counters.Get(ctx, tenant, time.Now().Add(-24*time.Hour), time.Now())
			if err == nil {
				err = fx.store.AddUsage(ctx, tenant, usage.Lifecycle(), days)
			}
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]int64{}
			for _, d := range days {
				for k, v := range d.Counts {
					got[k] += v
				}
			}
			if !maps.Equal(got, want) {
				t.Errorf("%s's usage %v, want %v", tenant, got, want)
			}
		}

		key := fx.keys.QueueUsage("a", time.Now())
		at, err := fx.rdb.PExpireTime(ctx, key).Result()
		if want := usage.DropAt(time.Now(), usage.DefaultRetention); err != nil || at.Milliseconds() != want.UnixMilli() {
			t.Errorf("%s expires at %v (%v), want %v", key, at, err, want.UnixMilli())
		}
		if err := fx.store.AddUsage(ctx, "no/tenant", usage.Lifecycle(), nil); err == nil {
			t.Error("AddUsage of a malformed tenant: no error")
		}
	})
}
