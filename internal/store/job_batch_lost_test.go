package store_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/leasehold/leasehold/internal/store"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/job"
)

// A run of the submit script whose reply is lost (its connection cut, and
// the client not resending it) leaves its items with an *UnansweredError,
// and the runs after it answered. Their idempotency records are kept: the
// batch sent again answers every item with the one job it got, the lost
// run's included, and creates none.
//
// Fails when the lost run's records are dropped as a refused item's are
// (sent again, its items get second jobs), or when its items are left
// without an answer or answered as refused.
func TestSubmitBatchKeepsTheRecordsOfALostRun(t *testing.T) {
	t.Parallel()
	proxy := testenv.StartProxy(t, testenv.Redis(t).Addr())
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr(), MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	fx := newFixture(t, rdb, store.Config{})
	const n, lost = 250, 100 // three runs of the script; the second's reply is lost
	items := make([]job.BatchItem, n)
	for i := range items {
		items[i] = job.BatchItem{IdempotencyKey: fmt.Sprint("k", i),
			Submission: job.Submission{Kind: "echo", Metadata: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i))}}
	}
	testenv.Before(rdb, testenv.HasArg(fmt.Sprintf(`{"n":%d}`, lost)), proxy.Cut)

	res, err := fx.store.SubmitBatch(t.Context(), "acme", items, job.Cap{})
	if err == nil {
		t.Fatal("SubmitBatch reported no failure")
	}
	ids := map[int]string{}
	for i, r := range res {
		var unanswered *job.UnansweredError
		switch inLost := i >= lost && i < 2*lost; {
		case inLost && !errors.As(r.Err, &unanswered):
			t.Fatalf("item %d of the lost run: created %v, %v", i, r.Created, r.Err)
		case !inLost && (!r.Created || r.Err != nil):
			t.Fatalf("item %d: created %v, %v", i, r.Created, r.Err)
		case !inLost:
			ids[i] = r.Job.ID
		}
	}

	again, err := fx.store.SubmitBatch(t.Context(), "acme", items, job.Cap{})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for i, r := range again {
		switch {
		case r.Err != nil || r.Created:
			t.Errorf("item %d sent again: created %v, %v; want its job", i, r.Created, r.Err)
		case ids[i] != "" && r.Job.ID != ids[i]:
			t.Errorf("item %d sent again: job %s, want %s", i, r.Job.ID, ids[i])
		case string(r.Job.Metadata) != fmt.Sprintf(`{"n":%d}`, i):
			t.Errorf("item %d sent again: the job of metadata %s", i, r.Job.Metadata)
		}
		seen[r.Job.ID] = true
	}
	if len(seen) != n {
		t.Errorf("%d distinct jobs for %d items", len(seen), n)
	}
}
