package store

import (
	"fmt"
	"sync"
	"testing"

	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/job"
)

// A patch's write (limit_set.lua given the fields as read) lands only on
// the key as the patch read it: one that read before another write
// changed the key writes nothing, and PatchKeyLimit reads again, so
// neither change is lost.
//
// Fails when the script writes without comparing.
func TestSetLimitRefusesAStaleRead(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, s *Store) {
		ctx := t.Context()
		ten := int64(10)
		if err := s.SetKeyLimit(ctx, "model:m", job.KeyLimit{Limit: &ten, Budget: job.Budget{RPM: 100}}); err != nil {
			t.Fatal(err)
		}
		twenty := limitFields{limit: "20"}
		// Read as it was before the limit became 10 (none), or before its rpm.
		for _, was := range []limitFields{{"", "rpm=100"}, {"10", ""}, {"9", "rpm=100"}} {
			_, stale, err := s.setLimit(ctx, "model:m", twenty, &was)
			if err != nil || !stale {
				t.Fatalf("write after a stale read %+v: stale %v, %v; want refused", was, stale, err)
			}
		}
		if got := s.rdb.HGet(ctx, s.keys.Limits(), "model:m").Val(); got != "10" {
			t.Fatalf("a refused write left the limit %q", got)
		}
		removed, stale, err := s.setLimit(ctx, "model:m", twenty, &limitFields{"10", "rpm=100"})
		if err != nil || stale || removed != 1 {
			t.Fatalf("write of the key as it is: removed %d, stale %v, %v; want 1, false", removed, stale, err)
		}
		limit, budget := s.rdb.HGet(ctx, s.keys.Limits(), "model:m").Val(), s.rdb.HExists(ctx, s.keys.Budgets(), "model:m").Val()
		if limit != "20" || budget {
			t.Fatalf("after the write: limit %q, budget kept %v; want 20 and none", limit, budget)
		}
	})
}

// Patches of different fields of one key, sent at once, all land: none
// overwrites another with the key as it read it.
//
// Fails when PatchKeyLimit writes without the compare-and-set.
func TestPatchKeyLimitLosesNoConcurrentPatch(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, s *Store) {
		ctx := t.Context()
		for round := int64(1); round <= 20; round++ {
			n, adaptive := job.Some(round*10), round%2 == 1
			var wg sync.WaitGroup
			for _, p := range []job.LimitPatch{{Limit: &n}, {RPM: &n}, {TPM: &n}, {Adaptive: &adaptive}} {
				wg.Go(func() {
					if _, err := s.PatchKeyLimit(ctx, "model:m", p); err != nil {
						t.Error(err)
					}
				})
			}
			wg.Wait()
			limits, budgets, err := s.limitsOf(ctx, []string{"model:m"})
			if err != nil {
				t.Fatal(err)
			}
			want := fmt.Sprintf("limit %d %+v", n.Value, job.Budget{RPM: n.Value, TPM: n.Value, Adaptive: adaptive})
			if got := fmt.Sprintf("limit %d %+v", limits["model:m"], budgets["model:m"]); got != want {
				t.Fatalf("round %d: the key is %s, want %s: a patch was lost", round, got, want)
			}
		}
	})
}

// eachStore runs f in parallel on a Store of each backend
// (testenv.Backends), under a key prefix of its own.
func eachStore(t *testing.T, f func(t *testing.T, s *Store)) {
	for _, b := range testenv.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			s := New(b.Client, Config{Prefix: testenv.Prefix(t)})
			f(t, s)
		})
	}
}
