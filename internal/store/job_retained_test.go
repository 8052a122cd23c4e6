package store_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/internal/store"

	"github.com/leasehold/leasehold/job"
)

// A tenant's retained bytes have a quota: the submit past it is refused
// (*QuotaError) and writes nothing, another tenant's submit succeeds, a
// batch's items and a retry count too, and deleting jobs gives their
// bytes back, to 0 and no key once the last is gone; a batch across
// queues then counts each item after the items before it.
func TestRetainedBytesQuota(t *testing.T) {
	t.Parallel()
	eachBackend(t, store.Config{}, func(t *testing.T, fx fixture) {
		ctx := t.Context()
		queues := []string{"default", "other"}
		limit := job.Cap{MaxBytes: 20_000, Queues: queues}
		input := []byte(`{"prompt":"` + strings.Repeat("x", 4000) + `"}`)
		sub := func(queue string) job.Submission {
			return job.Submission{Kind: "echo", Queue: queue, Input: input}
		}
		retained := func(tenant string) int64 {
			t.Helper()
			n, err := fx.store.Retained(ctx, tenant, queues)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
		var ids []string
		for i := 0; ; i++ {
			// Across queues, as the cap counts.
			j, _, err := fx.store.SubmitWithin(ctx, "acme", sub(queues[i%2]), "", limit)
			var quota *job.QuotaError
			if errors.As(err, &quota) {
				if !errors.Is(err, job.ErrOverCap) || quota.Max != limit.MaxBytes || quota.Bytes+int64(len(input)) <= limit.MaxBytes {
					t.Fatalf("refusal %+v: want one that the job's input would take past %d", quota, limit.MaxBytes)
				}
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, j.ID)
			if n := retained("acme"); n > limit.MaxBytes || n < int64(len(ids)*len(input)) {
				t.Fatalf("%d jobs of %d bytes of input are charged %d; the quota is %d", len(ids), len(input), n, limit.MaxBytes)
			}
		}
		if len(ids) != 4 {
			t.Fatalf("%d jobs of %d bytes fit in %d, want 4", len(ids), len(input), limit.MaxBytes)
		}
		before := retained("acme")
		if list, _, err := fx.store.List(ctx, job.ListQuery{Tenant: "acme", Limit: 100}); err != nil || len(list) != len(ids) {
			t.Fatalf("acme lists %d jobs (%v), want %d: the refused one is not listed", len(list), err, len(ids))
		}
		res, err := fx.store.SubmitBatch(ctx, "acme", []job.BatchItem{{Submission: sub("default")}, {Submission: sub("other")}}, limit)
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range res {
			if !errors.As(r.Err, new(*job.QuotaError)) {
				t.Errorf("batch item %d past the quota: %v", i, r.Err)
			}
		}
		if _, _, err := fx.store.SubmitWithin(ctx, "globex", sub("default"), "", limit); err != nil {
			t.Fatalf("another tenant's submit: %v", err)
		}
		if n := retained("acme"); n != before {
			t.Fatalf("refusals changed acme's charge from %d to %d", before, n)
		}

		// An ended job's retry keeps it past its retention: refused too.
		if _, err := fx.store.Cancel(ctx, "acme", ids[0], false); err != nil {
			t.Fatal(err)
		}
		if _, err := fx.store.RetryWithin(ctx, "acme", ids[0], false, job.Cap{MaxBytes: before, Queues: queues}); !errors.As(err, new(*job.QuotaError)) {
			t.Fatalf("retry at the quota: %v", err)
		}
		for _, id := range ids {
			if _, err := fx.store.Cancel(ctx, "acme", id, false); err != nil {
				t.Fatal(err)
			}
			if _, err := fx.store.Delete(ctx, "acme", id, false); err != nil {
				t.Fatal(err)
			}
			// Twice: a job is given back once.
			if _, err := fx.store.Delete(ctx, "acme", id, false); !errors.Is(err, job.ErrNotFound) {
				t.Fatalf("second delete: %v", err)
			}
		}
		if n := retained("acme"); n != 0 {
			t.Fatalf("every job deleted, acme is still charged %d bytes", n)
		}
		for _, q := range queues {
			if n := fx.rdb.Exists(ctx, fx.keys.QueueRetained(q, "acme")).Val(); n != 0 {
				t.Errorf("every job deleted, acme's retained bytes in %s are still a key", q)
			}
		}
		if _, _, err := fx.store.SubmitWithin(ctx, "acme", sub("default"), "", limit); err != nil {
			t.Fatalf("a submit once jobs are deleted: %v", err)
		}

		// A batch across queues counts each item after those before it,
		// in whichever queue: room for one more job, not two.
		one := retained("acme")
		res, err = fx.store.SubmitBatch(ctx, "acme", []job.BatchItem{{Submission: sub("default")}, {Submission: sub("other")}},
			job.Cap{MaxBytes: 2*one + one/2, Queues: queues})
		if err != nil {
			t.Fatal(err)
		}
		if !res[0].Created || !errors.As(res[1].Err, new(*job.QuotaError)) {
			t.Fatalf("a batch with room for one more job: %+v, %v; want the first created, the second past the quota", res[0].Created, res[1].Err)
		}
	})
}
