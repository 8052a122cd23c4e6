package job_test

import (
	"encoding/json"
	"strconv"
	"testing"

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
		fx := newFixture(b, rdb, job.Config{})
		for b.Loop() {
			if _, _, err := fx.store.Submit(b.Context(), "acme", sub, ""); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Submit/idempotency-key", func(b *testing.B) {
		fx := newFixture(b, rdb, job.Config{})
		i := 0
		for b.Loop() {
			i++
			if _, _, err := fx.store.Submit(b.Context(), "acme", sub, "key-"+strconv.Itoa(i)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("HSET-baseline", func(b *testing.B) {
		fx := newFixture(b, rdb, job.Config{})
		j := fx.submit(b, "acme", sub)
		record := fx.rdb.HGetAll(b.Context(), fx.keys.Job(j.Queue, j.ID)).Val()
		for b.Loop() {
			if err := fx.rdb.HSet(b.Context(), fx.keys.Job(j.Queue, uuid.NewString()), record).Err(); err != nil {
				b.Fatal(err)
			}
		}
	})
}
