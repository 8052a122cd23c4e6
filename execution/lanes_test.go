package execution_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/leasehold/leasehold/execution"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/job"
)

// submitLanes submits n jobs of kind for tenant, each in a lane of its own
// (a key of the tenant's own, tenant:<tenant>:<i>, beside keys), in
// batches.
func (f *fixture) submitLanes(t *testing.T, tenant, kind string, n int, keys ...string) {
	t.Helper()
	for from := 0; from < n; from += job.MaxBatch {
		items := make([]job.BatchItem, min(job.MaxBatch, n-from))
		for i := range items {
			ckeys := append([]string{fmt.Sprintf("tenant:%s:%d", tenant, from+i)}, keys...)
			items[i] = job.BatchItem{Submission: job.Submission{Kind: kind, ConcurrencyKeys: ckeys}}
		}
		res, err := f.store.SubmitBatch(t.Context(), tenant, items, job.Cap{})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range res {
			if r.Err != nil {
				t.Fatal(r.Err)
			}
		}
	}
}

// However many lanes one tenant keeps waiting for a full key, another
// tenant's job starts at the next claim: a tenant's lanes share one turn,
// and a lane found waiting gives its turn up instead of holding the head
// of the queue, also once a third tenant's flood has moved the queue's
// clock past every waiting lane's turn.
func TestManyBlockedLanesHideNoOtherTenant(t *testing.T) {
	for _, tc := range []struct {
		blocked int
		share   bool // the hog waits for its per_tenant share, not for the key
	}{{40, false}, {10_000, false}, {10_000, true}} {
		blocked := tc.blocked
		t.Run(fmt.Sprintf("%d share=%v", blocked, tc.share), func(t *testing.T) {
			f := newFixture(t)
			if tc.share {
				f.setLimit(t, "model:shared", 100)
				f.setBudget(t, "model:shared", "per_tenant=1")
			} else {
				f.setLimit(t, "model:shared", 1)
			}
			f.startWorker(t, execution.Config{Concurrency: 8}, map[string]execution.Handler{"block": block, "echo": echo})
			// The hog holds model:shared, and keeps blocked lanes waiting for it.
			f.submitLanes(t, "hog", "block", 1, "model:shared")
			testenv.Eventually(t, 10*time.Second, func() bool { return len(f.liveHolders(t, "model:shared")[0]) == 1 },
				"the hog's first job never took model:shared")
			f.submitLanes(t, "hog", "block", blocked, "model:shared")

			startsAtOnce := func(when string) {
				t.Helper()
				j := f.submit(t, job.Submission{Kind: "echo"})
				start := time.Now()
				testenv.Eventually(t, 2*time.Second, func() bool {
					return f.get(t, j.ID).State == job.StateSucceeded
				}, "another tenant's job did not run within 2s beside %d blocked lanes %s: %v", blocked, when, f.get(t, j.ID).State)
				t.Logf("another tenant's job ran %v after its submission beside %d blocked lanes %s", time.Since(start).Round(time.Millisecond), blocked, when)
			}
			startsAtOnce("")
			startsAtOnce("")

			// A flood of one lane moves the clock past every blocked lane's
			// turn while they wait.
			flood := blocked + 1000
			for from := 0; from < flood; from += job.MaxBatch {
				items := make([]job.BatchItem, min(job.MaxBatch, flood-from))
				for i := range items {
					items[i] = job.BatchItem{Submission: job.Submission{Kind: "echo"}}
				}
				if _, err := f.store.SubmitBatch(t.Context(), "flood", items, job.Cap{}); err != nil {
					t.Fatal(err)
				}
			}
			startsAtOnce("during a flood")
			testenv.Eventually(t, 120*time.Second, func() bool {
				st, err := f.store.TenantStats(t.Context(), "flood")
				return err == nil && len(st) == 1 && st[0].Queued+st[0].Running == 0
			}, "the flood never ran")
			startsAtOnce("after a flood")
		})
	}
}
