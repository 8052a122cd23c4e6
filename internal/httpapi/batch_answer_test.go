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
	problem := marshal(map[string]any{"title": "a <b> & c", "status": 422})
	entries := []batchEntry{
		jobEntry(full, true),
		{Status: http.StatusUnprocessableEntity, Problem: problem},
		jobEntry(bare, false),
	}
	// The same answer with each job as a job.Job, for json.Marshal to
	// encode.
	type entry struct {
		Status  int             `json:"status"`
		Job     *job.Job        `json:"job,omitempty"`
		Problem json.RawMessage `json:"problem,omitempty"`
	}
	plain := []entry{{http.StatusCreated, &full, nil}, {http.StatusUnprocessableEntity, nil, problem}, {http.StatusOK, &bare, nil}}
	for _, n := range [][2]int{{0, 3}, {0, 1}, {1, 2}} {
		want := marshal(batchBody[entry]{Jobs: plain[n[0]:n[1]]})
		if got := batchAnswer(entries[n[0]:n[1]]); string(got) != string(want) {
			t.Errorf("batchAnswer:\n%s\njson.Marshal:\n%s", got, want)
		}
	}
}
