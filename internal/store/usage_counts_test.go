package store

import (
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/internal/testenv"
)

// An event is counted once per counter, whatever its retries: a retry on
// the next day finds its mark, and says the n it was counted with; a day
// past retention counts nothing; counts of several tenants and counters go
// out together, and each day's counts read back.
func TestCountUsage(t *testing.T) {
	eachBackend(t, func(t *testing.T, _ redis.UniversalClient, s *Store) {
		ctx := t.Context()
		r := UsageRetention{MarkTTL: time.Hour, Days: 48 * time.Hour}
		now := time.Now()
		counts := []UsageCount{
			{Tenant: "acme", Counter: "tokens", N: 5, Events: []UsageEvent{{ID: "e1", At: now}, {ID: "e2", At: now}}},
			{Tenant: "acme", Counter: "tokens", N: 5, Events: []UsageEvent{{ID: "e1", At: now}}}, // a retry in the same round trip
			{Tenant: "acme", Counter: "calls", N: 1, Events: []UsageEvent{{ID: "e1", At: now}}},
			{Tenant: "other", Counter: "tokens", N: 7, Events: []UsageEvent{{ID: "e1", At: now}}},
		}
		marks, errs := s.CountUsage(ctx, r, counts)
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
		want := [][]UsageMark{{{Added: true}, {Added: true}}, {{Was: "5"}}, {{Added: true}}, {{Added: true}}}
		for i := range want {
			for j := range want[i] {
				if marks[i][j] != want[i][j] {
					t.Errorf("count %d, event %d: %+v, want %+v", i, j, marks[i][j], want[i][j])
				}
			}
		}
		retry := []UsageCount{
			{Tenant: "acme", Counter: "tokens", N: 6, Events: []UsageEvent{{ID: "e1", At: now.Add(24 * time.Hour)}}},
			{Tenant: "acme", Counter: "tokens", N: 1, Events: []UsageEvent{{ID: "old", At: now.Add(-5 * 24 * time.Hour)}}},
		}
		marks, errs = s.CountUsage(ctx, r, retry)
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
		if marks[0][0] != (UsageMark{Was: "5"}) || marks[1][0] != (UsageMark{Expired: true}) {
			t.Errorf("a retry the next day with another n, and a day past retention: %+v, %+v; want counted with 5, expired", marks[0][0], marks[1][0])
		}
		days, err := s.UsageDays(ctx, "acme", now.Add(-24*time.Hour), 3)
		if err != nil {
			t.Fatal(err)
		}
		if len(days) != 3 || len(days[0].Counts) != 0 || days[1].Counts["tokens"] != 10 || days[1].Counts["calls"] != 1 ||
			len(days[2].Counts) != 0 || !days[1].Date.Equal(utcDay(now)) {
			t.Errorf("acme's days: %+v; want 10 tokens and 1 call today alone", days)
		}
	})
}

// The usage script runs after Redis lost its script cache.
func TestCountUsageAfterScriptFlush(t *testing.T) {
	t.Parallel()
	rdb := testenv.StartRedis(t).Client(t)
	s := New(rdb, Config{Prefix: testenv.Prefix(t)})
	ctx := t.Context()
	if err := rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	marks, errs := s.CountUsage(ctx, UsageRetention{MarkTTL: time.Hour, Days: time.Hour},
		[]UsageCount{{Tenant: "acme", Counter: "tokens", N: 3, Events: []UsageEvent{{ID: "e1", At: time.Now()}}}})
	if errs[0] != nil || !marks[0][0].Added {
		t.Fatalf("count after SCRIPT FLUSH: %+v, %v; want added", marks, errs[0])
	}
}
