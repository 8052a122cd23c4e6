package execution_test

import (
	"testing"
	"time"

	"github.com/leasehold/leasehold/execution"
	"github.com/leasehold/leasehold/internal/store/keys"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/job"
)

// setBudget sets key's budget options as the API writes them
// ("rpm=10;per_tenant=5").
func (f *fixture) setBudget(t *testing.T, key, options string) {
	t.Helper()
	if err := f.rdb.HSet(t.Context(), keys.New(f.prefix).Budgets(), key, options).Err(); err != nil {
		t.Fatal(err)
	}
}

// No tenant holds more than a key's per_tenant of its slots, whatever the
// kind of its jobs, and another tenant's job finds the rest free.
func TestATenantHoldsNoMoreThanItsShareOfAKey(t *testing.T) {
	f := newFixture(t)
	f.setLimit(t, "model:shared", 4)
	f.setBudget(t, "model:shared", "per_tenant=2")
	f.startWorker(t, execution.Config{Concurrency: 16}, map[string]execution.Handler{"block": block, "echo": echo})

	running := func() int64 {
		st, err := f.store.TenantStats(t.Context(), "hog")
		if err != nil || len(st) != 1 {
			t.Fatalf("the hog's counts: %+v, %v", st, err)
		}
		if st[0].Running > 2 {
			t.Fatalf("the hog runs %d jobs holding model:shared, more than its share of 2", st[0].Running)
		}
		return st[0].Running
	}
	f.submitLanes(t, "hog", "block", 10, "model:shared")
	testenv.Eventually(t, 10*time.Second, func() bool { return running() == 2 }, "the hog never took its share of model:shared")
	j := f.submit(t, job.Submission{Kind: "echo", ConcurrencyKeys: []string{"model:shared"}})
	testenv.Eventually(t, 5*time.Second, func() bool {
		running()
		return f.get(t, j.ID).State == job.StateSucceeded
	}, "another tenant's job did not run beside the hog's share: %v", lazy(func() string { return string(f.get(t, j.ID).State) }))
	if got := f.liveHolders(t, "model:shared@tenant:hog")[0]; len(got) != 2 {
		t.Fatalf("the hog's share key is held by %v, want its 2 running jobs", got)
	}
}

// A tenant's share of a key's rpm is per_tenant/limit of it: its jobs
// start no faster than that, and leave the rest to other tenants.
func TestATenantSpendsNoMoreThanItsShareOfAKeysRPM(t *testing.T) {
	f := newFixture(t)
	f.setLimit(t, "model:r", 10)
	f.setBudget(t, "model:r", "rpm=10;per_tenant=5")
	f.startWorker(t, execution.Config{Concurrency: 16}, map[string]execution.Handler{"echo": echo})

	f.submitLanes(t, "hog", "echo", 10, "model:r")
	testenv.Eventually(t, 10*time.Second, func() bool {
		st, err := f.store.TenantStats(t.Context(), "hog")
		return err == nil && len(st) == 1 && st[0].Queued == 5 && st[0].Running == 0
	}, "the hog's jobs did not stop at its share of 5 requests a minute")
	j := f.submit(t, job.Submission{Kind: "echo", ConcurrencyKeys: []string{"model:r"}})
	f.waitState(t, j.ID, 5*time.Second, job.StateSucceeded)
	st, err := f.store.TenantStats(t.Context(), "hog")
	if err != nil || st[0].Queued != 5 {
		t.Fatalf("the hog has %+v queued (%v), want 5 left for the next minute", st, err)
	}
}
