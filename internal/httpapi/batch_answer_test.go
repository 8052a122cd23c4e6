package httpapi

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/leasehold/leasehold/job"
)

// batchAnswer writes what json.Marshal writes for the same entries, HTML
// escapes included.
func TestBatchAnswerIsJSONMarshals(t *testing.T) {
	now := time.Date(2026, 12, 3, 17, 0, 0, 123456789, time.UTC)
	name := "nightly <&>"
	full := job.Job{
		ID: "0a1b", Tenant: "acme", Queue: "default", Kind: "llm.chat", State: job.StateSucceeded,
		Attempt: 1, MaxAttempts: 3, Priority: -5, ConcurrencyKeys: []string{"model:gpt-4o", "tenant:acme"},
		CreatedAt: now, StartedAt: &now, FinishedAt: &now, Result: json.RawMessage(`{"text": "<b>\u2028&</b>"}`),
		Error: &job.Error{Message: "a <b> & c"}, Metadata: json.RawMessage(`{"a":[1, 2.50]}`), Schedule: &name,
		Cost: &job.Cost{Tokens: 12}, Checkpoint: json.RawMessage(`"x"`),
	}
	bare := job.Job{ID: "0a1c", Tenant: "acme", Queue: "default", Kind: "echo", State: job.StateQueued, CreatedAt: now}
	entries := []batchEntry{
		{Status: http.StatusCreated, Job: &full},
		{Status: http.StatusUnprocessableEntity, Problem: marshal(map[string]any{"title": "a <b> & c", "status": 422})},
		{Status: http.StatusOK, Job: &bare},
	}
	for _, es := range [][]batchEntry{entries, entries[:1], entries[1:2]} {
		want := marshal(batchBody[batchEntry]{Jobs: es})
		if got := batchAnswer(es); string(got) != string(want) {
			t.Errorf("batchAnswer:\n%s\njson.Marshal:\n%s", got, want)
		}
	}
}
