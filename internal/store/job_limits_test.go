package store_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/store"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/job"
)

func ptr(n int64) *int64 { return &n }

func TestLimitsSetListDelete(t *testing.T) {
	t.Parallel()
	eachBackend(t, store.Config{}, func(t *testing.T, fx fixture) {
		ctx := context.Background()
		if got, err := fx.store.Limits(ctx); err != nil || len(got) != 0 || got == nil {
			t.Fatalf("Limits on empty = %#v, %v; want empty, non-nil", got, err)
		}
		for k, n := range map[string]int64{"tenant:*": 10, "model:gpt-4o": 200, "model:claude": 0} {
			if err := fx.store.SetLimit(ctx, k, n); err != nil {
				t.Fatal(err)
			}
		}
		if err := fx.store.SetLimit(ctx, "model:gpt-4o", 150); err != nil { // overwrite
			t.Fatal(err)
		}
		var invalid *job.ValidationError
		if err := fx.store.SetLimit(ctx, "bad key", 1); !errors.As(err, &invalid) {
			t.Errorf("SetLimit(bad key) = %v", err)
		}
		if err := fx.store.SetLimit(ctx, "ok", -1); !errors.As(err, &invalid) {
			t.Errorf("SetLimit(-1) = %v", err)
		}
		got, err := fx.store.Limits(ctx)
		if err != nil {
			t.Fatal(err)
		}
		want := []job.Limit{{Key: "model:claude", Limit: job.Some(0)}, {Key: "model:gpt-4o", Limit: job.Some(150)}, {Key: "tenant:*", Limit: job.Some(10)}}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("Limits = %+v, want %+v", got, want)
		}
		if existed, err := fx.store.DeleteLimit(ctx, "model:gpt-4o"); err != nil || !existed {
			t.Fatalf("DeleteLimit = %v, %v", existed, err)
		}
		if existed, err := fx.store.DeleteLimit(ctx, "model:gpt-4o"); err != nil || existed {
			t.Fatalf("second DeleteLimit = %v, %v", existed, err)
		}
		got, err = fx.store.Limits(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if want = []job.Limit{{Key: "model:claude", Limit: job.Some(0)}, {Key: "tenant:*", Limit: job.Some(10)}}; !reflect.DeepEqual(got, want) {
			t.Fatalf("after delete Limits = %+v, want %+v", got, want)
		}
	})
}

func TestLimitsInUseCountsLiveLeases(t *testing.T) {
	t.Parallel()
	eachBackend(t, store.Config{}, func(t *testing.T, fx fixture) {
		ctx := context.Background()
		now, err := fx.rdb.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		ms := float64(now.UnixMilli())
		future, past := ms+60_000, ms-60_000
		if err := fx.rdb.SAdd(ctx, fx.keys.Queues(), "default", "batch", "idle").Err(); err != nil {
			t.Fatal(err)
		}
		// Executions of every queue hold leases in the one set of each key.
		add := func(key string, members ...redis.Z) {
			if err := fx.rdb.ZAdd(ctx, fx.keys.LeaseSet(key), members...).Err(); err != nil {
				t.Fatal(err)
			}
		}
		add("model:gpt-4o", redis.Z{Score: future, Member: "j1"}, redis.Z{Score: future, Member: "j2"}, redis.Z{Score: past, Member: "j3"})
		add("model:gpt-4o", redis.Z{Score: future, Member: "j4"}, redis.Z{Score: past, Member: "j5"})
		add("tenant:acme", redis.Z{Score: future, Member: "j4"})
		add("model:unlimited", redis.Z{Score: future, Member: "j1"}) // no limit: not listed
		for k, n := range map[string]int64{"model:gpt-4o": 5, "tenant:*": 1, "model:idle": 3} {
			if err := fx.store.SetLimit(ctx, k, n); err != nil {
				t.Fatal(err)
			}
		}
		got, err := fx.store.Limits(ctx)
		if err != nil {
			t.Fatal(err)
		}
		want := []job.Limit{
			{Key: "model:gpt-4o", Limit: job.Some(5), InUse: 3},
			{Key: "model:idle", Limit: job.Some(3), InUse: 0},
			{Key: "tenant:*", Limit: job.Some(1), InUse: 0}, // wildcards are not summed
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("Limits = %+v, want %+v", got, want)
		}
	})
}

// Waiting counts the ready jobs naming each key, over every queue: not a
// delayed job, not a cancelled one, and not for a wildcard.
func TestLimitsWaitingCountsReadyJobs(t *testing.T) {
	t.Parallel()
	eachBackend(t, store.Config{}, func(t *testing.T, fx fixture) {
		ctx := context.Background()
		for k, n := range map[string]int64{"model:a": 1, "tenant:*": 5} {
			if err := fx.store.SetLimit(ctx, k, n); err != nil {
				t.Fatal(err)
			}
		}
		submit := func(tenant string, sub job.Submission) job.Job {
			t.Helper()
			j, _, err := fx.store.Submit(ctx, tenant, sub, "")
			if err != nil {
				t.Fatal(err)
			}
			return j
		}
		a := job.Submission{Kind: "k", ConcurrencyKeys: []string{"model:a"}}
		batch := a
		batch.Queue = "batch"
		delayed := a
		delayed.Delay = job.Duration(time.Hour)
		var acme []job.Job
		for range 3 {
			acme = append(acme, submit("acme", a))
		}
		submit("beta", batch)
		submit("beta", batch)
		submit("acme", delayed)
		submit("acme", job.Submission{Kind: "k"})
		if _, err := fx.store.Cancel(ctx, "acme", acme[0].ID, false); err != nil {
			t.Fatal(err)
		}

		got, err := fx.store.Limits(ctx)
		if err != nil {
			t.Fatal(err)
		}
		want := []job.Limit{{Key: "model:a", Limit: job.Some(1), Waiting: 4}, {Key: "tenant:*", Limit: job.Some(5)}}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("Limits = %+v, want %+v", got, want)
		}
	})
}

// LimitsPage walks the configured keys by key, a page at a time: every key
// exactly once, pages full of the keys Keep leaves in, the next cursor
// empty after the last; a cursor or limit out of bounds is refused.
func TestLimitsPage(t *testing.T) {
	t.Parallel()
	eachBackend(t, store.Config{}, func(t *testing.T, fx fixture) {
		ctx := context.Background()
		var want []string
		for i := range 7 {
			key := fmt.Sprintf("model:m%d", i)
			if err := fx.store.SetLimit(ctx, key, int64(i)); err != nil {
				t.Fatal(err)
			}
			want = append(want, key)
		}
		for _, key := range []string{"tenant:acme", "tenant:globex"} {
			if err := fx.store.SetLimit(ctx, key, 1); err != nil {
				t.Fatal(err)
			}
		}
		notGlobex := func(key string) bool { return key != "tenant:globex" }
		want = append(want, "tenant:acme")
		var got []string
		q := job.LimitsQuery{Limit: 3, Keep: notGlobex}
		for pages := 1; ; pages++ {
			page, next, err := fx.store.LimitsPage(ctx, q)
			if err != nil {
				t.Fatal(err)
			}
			if next != "" && len(page) != 3 || len(page) > 3 {
				t.Fatalf("page %d holds %d keys, next %q: want 3 before the last", pages, len(page), next)
			}
			for _, l := range page {
				got = append(got, l.Key)
			}
			if next == "" {
				break
			}
			q.Cursor = next
		}
		if !slices.Equal(got, want) {
			t.Fatalf("paging listed %v, want %v", got, want)
		}
		if page, next, err := fx.store.LimitsPage(ctx, job.LimitsQuery{}); err != nil || len(page) != 9 || next != "" {
			t.Fatalf("default page: %d keys, next %q, %v; want all 9 and no next", len(page), next, err)
		}
		if _, _, err := fx.store.LimitsPage(ctx, job.LimitsQuery{Cursor: "%%%"}); !errors.Is(err, job.ErrBadCursor) {
			t.Errorf("bad cursor: %v", err)
		}
		var invalid *job.ValidationError
		if _, _, err := fx.store.LimitsPage(ctx, job.LimitsQuery{Limit: 501}); !errors.As(err, &invalid) || invalid.Errors[0].Field != "limit" {
			t.Errorf("limit 501: %v", err)
		}
	})
}
