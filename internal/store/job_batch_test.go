package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/store"

	"github.com/redis/go-redis/v9"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/leasehold/leasehold/job"
)

// The job SubmitBatch answers for an item it created is the job its hash
// holds, field for field, for items with and without each optional field,
// traced and not. The submit script sends a created job's clock back, not
// its fields: the Go side builds the rest from what it sent.
//
// Fails when a field the script writes is built otherwise in Go (a value
// formatted differently, a field left out or added).
func TestSubmitBatchAnswersTheJobsRecords(t *testing.T) {
	t.Parallel()
	tp := sdktrace.NewTracerProvider()
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	for _, traced := range []bool{true, false} {
		cfg := store.Config{TracerProvider: noop.NewTracerProvider()}
		if traced {
			cfg.TracerProvider = tp
		}
		t.Run(fmt.Sprintf("traced=%v", traced), func(t *testing.T) {
			eachBackend(t, cfg, func(t *testing.T, fx fixture) {
				ctx := t.Context()
				items := []job.BatchItem{
					{Submission: job.Submission{Kind: "echo"}},
					{Submission: job.Submission{Kind: "echo", Queue: "gpu", Input: json.RawMessage(`{"b": [1, 2], "a": "x"}`),
						ConcurrencyKeys: []string{"model:m"}, Priority: -3, MaxAttempts: 4, Timeout: dur(90 * time.Second),
						MaxWait: dur(time.Minute), Delay: dur(time.Hour), OnBusy: job.OnBusyReject,
						Metadata: json.RawMessage(`{"z": 1, "a": 2}`), Cost: &job.Cost{Tokens: 77}, Schedule: "nightly",
						Webhook: &job.WebhookTarget{URL: "https://hooks.example.com/done"}}},
					{Submission: job.Submission{Kind: "llm.chat", Input: json.RawMessage(`{"model": "m", "messages": [{"role": "user", "content": "hi"}]}`)}},
				}
				res, err := fx.store.SubmitBatch(ctx, "acme", items, job.Cap{})
				if err != nil {
					t.Fatal(err)
				}
				for i, r := range res {
					if r.Err != nil || !r.Created {
						t.Fatalf("item %d: created %v, %v", i, r.Created, r.Err)
					}
					stored, err := job.ParseRecord(r.Job.Queue, r.Job.ID, fx.rdb.HGetAll(ctx, fx.keys.Job(r.Job.Queue, r.Job.ID)).Val())
					if err != nil {
						t.Fatal(err)
					}
					if r.Job.Trace.IsValid() != traced {
						t.Errorf("item %d: trace valid %v, want %v", i, r.Job.Trace.IsValid(), traced)
					}
					if !reflect.DeepEqual(r.Job, stored) {
						t.Errorf("item %d:\nanswered %+v\n  stored %+v", i, r.Job, stored)
					}
				}
			})
		})
	}
}

// A batch of one queue runs as several scripts, one after another: the
// items are created in order across them, each counted against the
// tenant's cap after those before it; after Redis has lost its scripts
// too.
//
// Fails when a chunk is run out of order (the lane's order differs from
// the items'), when a chunk is given room that the chunks before it took
// (more than the cap created), or when a lost script fails the batch or
// reorders it (a chunk run again after those behind it).
func TestSubmitBatchCreatesInOrderAcrossItsScripts(t *testing.T) {
	t.Parallel()
	eachBackend(t, store.Config{}, func(t *testing.T, fx fixture) {
		ctx := t.Context()
		for _, flush := range []bool{false, true} {
			t.Run(fmt.Sprintf("flushed=%v", flush), func(t *testing.T) {
				queue := fmt.Sprintf("q%v", flush)
				// A submit loads the script, which the batch's chunks then
				// find, or have lost.
				if _, _, err := fx.store.Submit(ctx, "acme", job.Submission{Kind: "echo", Queue: queue + "-load"}, ""); err != nil {
					t.Fatal(err)
				}
				if flush {
					fx.onEveryMaster(t, func(ctx context.Context, m *redis.Client) error { return m.ScriptFlush(ctx).Err() })
				}
				const n, max = 350, 250 // four chunks
				items := make([]job.BatchItem, n)
				for i := range items {
					items[i] = job.BatchItem{Submission: job.Submission{Kind: "echo", Queue: queue,
						Metadata: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i))}}
				}
				res, err := fx.store.SubmitBatch(ctx, "acme", items, job.Cap{Max: max})
				if err != nil {
					t.Fatal(err)
				}
				var ids []string
				for i, r := range res {
					var capped *job.CapError
					switch {
					case i < max && (r.Err != nil || !r.Created || string(r.Job.Metadata) != fmt.Sprintf(`{"n":%d}`, i)):
						t.Fatalf("item %d: %v, %v, metadata %s", i, r.Created, r.Err, r.Job.Metadata)
					case i >= max && !errors.As(r.Err, &capped):
						t.Fatalf("item %d past the cap: %v", i, r.Err)
					}
					if i < max {
						ids = append(ids, r.Job.ID)
					}
				}
				lane := fx.rdb.ZRange(ctx, fx.keys.QueueLane(queue, `echo["tenant:acme"]`), 0, -1).Val()
				if !reflect.DeepEqual(lane, ids) {
					t.Errorf("the lane holds %d jobs in another order than the items' %d", len(lane), len(ids))
				}
			})
		}
	})
}

// Every chunk is sent: when one chunk of a queue's items fails, the
// chunks after it still create their jobs, and those are answered too.
// The batch reports the failure; the failed chunk's items are left
// unanswered.
//
// Fails when the answers stop at the failed chunk (jobs created but not
// reported), or when the failure is not reported.
func TestSubmitBatchAnswersTheChunksAfterAFailedOne(t *testing.T) {
	t.Parallel()
	eachBackend(t, store.Config{}, func(t *testing.T, fx fixture) {
		ctx := t.Context()
		// A replay of key "k" names job x, whose key now holds a string:
		// the submit script's read of it fails, and with it x's chunk.
		sub := job.Submission{Kind: "echo", Queue: "q"}
		x, _, err := fx.store.Submit(ctx, "acme", sub, "k")
		if err != nil {
			t.Fatal(err)
		}
		if err := fx.rdb.Set(ctx, fx.keys.Job("q", x.ID), "not a hash", 0).Err(); err != nil {
			t.Fatal(err)
		}
		const n, bad = 250, 150 // three chunks; the second fails
		items := make([]job.BatchItem, n)
		for i := range items {
			items[i] = job.BatchItem{Submission: sub}
		}
		items[bad].IdempotencyKey = "k"
		res, err := fx.store.SubmitBatch(ctx, "acme", items, job.Cap{})
		if err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
			t.Fatalf("SubmitBatch = %v, want the failed chunk's WRONGTYPE", err)
		}
		for i, r := range res {
			failed := i >= 100 && i < 200
			if answered := r.Created && r.Err == nil; answered == failed {
				t.Fatalf("item %d (failed chunk %v): created %v, %v", i, failed, r.Created, r.Err)
			}
		}
	})
}

// SubmitBatchEach hands each item that gets a job, created or replayed,
// to its callback once, with the result it returns for it, and no item
// refused.
//
// Fails when an item is handed twice or never, a refused one is handed,
// or one is handed another result than the one returned.
func TestSubmitBatchEachHandsEveryJobOnce(t *testing.T) {
	t.Parallel()
	eachBackend(t, store.Config{}, func(t *testing.T, fx fixture) {
		const n, invalid, first, replay = 250, 7, 100, 201 // three chunks
		items := make([]job.BatchItem, n)
		for i := range items {
			items[i] = job.BatchItem{Submission: job.Submission{Kind: "echo"}}
		}
		items[invalid].Submission.Kind = ""
		items[first].IdempotencyKey, items[replay].IdempotencyKey = "k", "k"
		handed := map[int]job.BatchResult{}
		res, err := fx.store.SubmitBatchEach(t.Context(), "acme", items, job.Cap{}, func(i int, r job.BatchResult) {
			if _, twice := handed[i]; twice {
				t.Errorf("item %d handed twice", i)
			}
			handed[i] = r
		})
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range res {
			h, ok := handed[i]
			switch {
			case i == invalid && (ok || r.Err == nil):
				t.Errorf("invalid item: handed %v, err %v", ok, r.Err)
			case i != invalid && !reflect.DeepEqual(h, r):
				t.Errorf("item %d: handed %+v (%v), returned %+v", i, h, ok, r)
			}
		}
		if !handed[first].Created || handed[replay].Created || handed[replay].Job.ID != handed[first].Job.ID {
			t.Errorf("key k: first created %v, replay created %v, ids %s and %s", handed[first].Created,
				handed[replay].Created, handed[first].Job.ID, handed[replay].Job.ID)
		}
	})
}
