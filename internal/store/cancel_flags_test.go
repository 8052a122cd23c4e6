package store

import (
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/internal/testenv"
)

// ClearCancels removes the flags it names, on a Redis and on a Cluster
// (where they are in different slots), and leaves the others; one read
// tells each flag apart.
func TestClearCancelsRemovesTheFlagsItNames(t *testing.T) {
	eachBackend(t, func(t *testing.T, _ redis.UniversalClient, s *Store) {
		ctx := t.Context()
		for _, id := range []string{"job-1", "job-2", "job-3"} {
			if err := s.RequestCancel(ctx, id, time.Minute); err != nil {
				t.Fatal(err)
			}
		}
		if set, err := s.CancelFlagged(ctx, "job-1", "job-2", "job-3", "job-4"); err != nil || !slices.Equal(set, []bool{true, true, true, false}) {
			t.Fatalf("flags after three requests: %v, %v; want the three requested", set, err)
		}
		if err := s.ClearCancels(ctx, "job-1", "job-3"); err != nil {
			t.Fatal(err)
		}
		if set, err := s.CancelFlagged(ctx, "job-1", "job-2", "job-3"); err != nil || !slices.Equal(set, []bool{false, true, false}) {
			t.Errorf("flags after clearing job-1 and job-3: %v, %v; want job-2's alone", set, err)
		}
	})
}

func TestCancelRequestedAtIsTheFirstRequestsTime(t *testing.T) {
	t.Parallel()
	rdb := testenv.Redis(t).Client(t)
	s := New(rdb, Config{Prefix: testenv.Prefix(t)})
	ctx := t.Context()
	if at, err := s.CancelRequestedAt(ctx, "job-1"); err != nil || !at.IsZero() {
		t.Fatalf("CancelRequestedAt before a request = %v, %v; want zero, nil", at, err)
	}
	// Redis runs on this machine: its clock is ours.
	before := time.Now().Truncate(time.Millisecond)
	if err := s.RequestCancel(ctx, "job-1", time.Second); err != nil {
		t.Fatal(err)
	}
	first, err := s.CancelRequestedAt(ctx, "job-1")
	if err != nil || first.Before(before) || first.After(time.Now()) {
		t.Fatalf("CancelRequestedAt = %v, %v; want between %v and now", first, err, before)
	}
	// A later request that lengthens the flag keeps the first one's time.
	testenv.Eventually(t, time.Second, func() bool { return time.Since(first) > 2*time.Millisecond }, "clock stuck")
	if err := s.RequestCancel(ctx, "job-1", time.Hour); err != nil {
		t.Fatal(err)
	}
	if again, err := s.CancelRequestedAt(ctx, "job-1"); err != nil || !again.Equal(first) {
		t.Fatalf("CancelRequestedAt after a second request = %v, %v; want %v", again, err, first)
	}
	if pttl := rdb.PTTL(ctx, s.keys.CancelFlag("job-1")).Val(); pttl <= time.Minute {
		t.Errorf("flag's life after a longer request: %v, want about an hour", pttl)
	}
	// A flag written before the time was recorded holds "1": no time.
	if err := rdb.Set(ctx, s.keys.CancelFlag("old"), "1", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if at, err := s.CancelRequestedAt(ctx, "old"); err != nil || !at.IsZero() {
		t.Fatalf("CancelRequestedAt of an old flag = %v, %v; want zero, nil", at, err)
	}
}

// A cancel request is written after Redis lost its script cache.
func TestRequestCancelAfterScriptFlush(t *testing.T) {
	t.Parallel()
	rdb := testenv.StartRedis(t).Client(t)
	s := New(rdb, Config{Prefix: testenv.Prefix(t)})
	ctx := t.Context()
	if err := rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := s.RequestCancel(ctx, "job-1", time.Minute); err != nil {
		t.Fatalf("request after SCRIPT FLUSH: %v", err)
	}
	if set, err := s.CancelFlagged(ctx, "job-1"); err != nil || !set[0] {
		t.Errorf("flag after the request: %v, %v; want set", set, err)
	}
}
