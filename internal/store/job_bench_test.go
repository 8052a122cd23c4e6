package store_test

import (
	"encoding/json"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/store"

	"github.com/google/uuid"

	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/job"
)

// BenchmarkSubmit measures Submit on the single Redis, against the floor of
// one plain HSET of a record of the same size.
func BenchmarkSubmit(b *testing.B) {
	rdb := testenv.Redis(b).Client(b)
	sub := job.Submission{
		Kind:            "llm.chat",
		Input:           json.RawMessage(`{"model":"gpt-4o","messages":[{"role":"user","content":"hello there"}]}`),
		ConcurrencyKeys: []string{"model:gpt-4o"},
		Metadata:        json.RawMessage(`{"conversation":"c-1"}`),
	}
	b.Run("Submit", func(b *testing.B) {
		fx := newFixture(b, rdb, store.Config{})
		for b.Loop() {
			if _, _, err := fx.store.Submit(b.Context(), "acme", sub, ""); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Submit/idempotency-key", func(b *testing.B) {
		fx := newFixture(b, rdb, store.Config{})
		i := 0
		for b.Loop() {
			i++
			if _, _, err := fx.store.Submit(b.Context(), "acme", sub, "key-"+strconv.Itoa(i)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("HSET-baseline", func(b *testing.B) {
		fx := newFixture(b, rdb, store.Config{})
		j := fx.submit(b, "acme", sub)
		record := fx.rdb.HGetAll(b.Context(), fx.keys.Job(j.Queue, j.ID)).Val()
		for b.Loop() {
			if err := fx.rdb.HSet(b.Context(), fx.keys.Job(j.Queue, uuid.NewString()), record).Err(); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkSubmitBatch submits batches of 1 000 echo jobs, those of the
// API's BenchmarkSubmit, by SubmitBatch: jobs/s and Redis CPU a job, and
// Redis's instructions when it runs under callgrind (make
// bench/instructions/batch).
func BenchmarkSubmitBatch(b *testing.B) {
	rdb := testenv.Redis(b).Client(b)
	fx := newFixture(b, rdb, store.Config{})
	items := make([]job.BatchItem, job.MaxBatch)
	for i := range items {
		items[i] = job.BatchItem{Submission: job.Submission{Kind: "echo",
			Input: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i)), Metadata: json.RawMessage(`{"batch":"bench"}`)}}
	}
	submit := func() {
		if _, err := fx.store.SubmitBatch(b.Context(), "acme", items, job.Cap{}); err != nil {
			b.Fatal(err)
		}
	}
	submit() // the script loaded and the queue named before the count starts
	cpu := testenv.RedisCPU(b, rdb)
	testenv.Callgrind(b, rdb, "--zero")
	start := time.Now()
	for b.Loop() {
		submit()
	}
	elapsed := time.Since(start)
	testenv.Callgrind(b, rdb, "--dump")
	n := float64(b.N * len(items))
	b.ReportMetric(n/elapsed.Seconds(), "jobs/s")
	b.ReportMetric(float64((testenv.RedisCPU(b, rdb)-cpu).Microseconds())/n, "redis-µs/job")
	b.ReportMetric(0, "ns/op")
}
