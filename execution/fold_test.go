package execution_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/execution"
	"github.com/leasehold/leasehold/internal/keys"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/job"
)

// A reaper folds the events of a job that ended into its folded key, and
// drops its empty fields: the job reads the same, and a replay, from the
// start or from any event, reads the same events before and after; a job
// with more events than a fold takes keeps its stream, and one whose hash
// holds short values only is folded too; a retry puts the events back in
// the stream, and the new ones follow them.
func TestFoldedEventsReadAsTheStream(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	handlers := map[string]execution.Handler{
		"few": func(ctx context.Context, e *execution.Execution) (any, error) {
			for _, d := range []any{"a \"quoted\" </slash> é\n", map[string]any{"n": 1.5, "x": nil}, []int{}} {
				if err := e.Emit(ctx, execution.EventProgress, d); err != nil {
					return nil, err
				}
			}
			return nil, execution.Permanent(errors.New("no"))
		},
		"many": func(ctx context.Context, e *execution.Execution) (any, error) {
			for i := range 120 {
				if err := e.Emit(ctx, execution.EventLog, i); err != nil {
					return nil, err
				}
			}
			return "done", nil
		},
	}
	_, stop := f.startWorker(t, execution.Config{}, handlers) // folds a minute after the end: not in this test
	// An input longer than a listpack's values, which the fold moves out of
	// the hash too (transition.lua's fold).
	input := raw(`{"prompt":"` + strings.Repeat("x", 64) + `"}`)
	few := f.submit(t, job.Submission{Kind: "few", Input: input, MaxAttempts: 1})
	many := f.submit(t, job.Submission{Kind: "many", Input: input})
	short := f.submit(t, job.Submission{Kind: "few", Input: raw(`{}`), MaxAttempts: 1})
	f.waitState(t, few.ID, 10*time.Second, job.StateFailed)
	f.waitState(t, many.ID, 10*time.Second, job.StateSucceeded)
	f.waitState(t, short.ID, 10*time.Second, job.StateFailed)
	stop()
	fewEvents, manyEvents := f.allEvents(t, few.ID), f.allEvents(t, many.ID)
	fewJob, err := json.Marshal(f.get(t, few.ID))
	if err != nil {
		t.Fatal(err)
	}
	if len(fewEvents) != 6 || len(manyEvents) != 123 {
		t.Fatalf("%d and %d events, want 6 and 123", len(fewEvents), len(manyEvents))
	}

	f.startWorker(t, execution.Config{FoldAfter: time.Millisecond}, handlers)
	ctx := t.Context()
	ks := keys.New(f.prefix)
	hash, stream := ks.Job("default", few.ID), ks.JobEvents("default", few.ID)
	testenv.Eventually(t, 10*time.Second, func() bool {
		return f.rdb.Exists(ctx, stream).Val() == 0
	}, "the job's events not folded")
	if f.rdb.Exists(ctx, ks.JobFolded("default", few.ID)).Val() != 1 {
		t.Fatal("stream gone, no folded key")
	}
	if got, _ := json.Marshal(f.get(t, few.ID)); string(got) != string(fewJob) {
		t.Fatalf("folded: %s\nwant %s", got, fewJob)
	}
	if got := f.allEvents(t, few.ID); !slices.EqualFunc(got, fewEvents, sameEvent) {
		t.Fatalf("folded: %s\nwant %s", got, fewEvents)
	}
	for i, e := range fewEvents {
		got, err := f.store.Events(ctx, "acme", few.ID, false, e.ID, 0)
		if err != nil || !slices.EqualFunc(got, fewEvents[i+1:], sameEvent) {
			t.Fatalf("after %s: %s, %v; want %s", e.ID, got, err, fewEvents[i+1:])
		}
	}
	if got, err := f.store.Events(ctx, "acme", few.ID, false, fewEvents[5].ID, 20*time.Millisecond); err != nil || len(got) != 0 {
		t.Fatalf("after the last, waiting: %v, %v", got, err)
	}
	if _, err := f.store.Events(ctx, "bob", few.ID, false, "", 0); !errors.Is(err, job.ErrNotFound) {
		t.Fatalf("another tenant: %v", err)
	}
	if f.rdb.Exists(ctx, ks.JobEvents("default", many.ID)).Val() != 1 {
		t.Fatal("the job of more events than a fold takes lost its stream")
	}
	testenv.Eventually(t, 10*time.Second, func() bool {
		return f.rdb.Exists(ctx, ks.JobEvents("default", short.ID)).Val() == 0
	}, "the job of short values not folded")

	// Retried, it fails again and is folded again: the old events, then
	// those of its second run.
	if f.rdb.HExists(ctx, hash, "trace").Val() {
		t.Fatal("the empty field trace kept by the fold")
	}
	if _, err := f.store.Retry(ctx, "acme", few.ID, false); err != nil {
		t.Fatal(err)
	}
	if !f.rdb.HExists(ctx, hash, "trace").Val() { // the claim reads the fields as they were
		t.Fatal("the empty field trace not written back by the retry")
	}
	f.waitState(t, few.ID, 10*time.Second, job.StateFailed)
	testenv.Eventually(t, 10*time.Second, func() bool {
		return f.rdb.Exists(ctx, stream).Val() == 0
	}, "the retried job's events not folded")
	got := f.allEvents(t, few.ID)
	if len(got) != 12 || !slices.EqualFunc(got[:6], fewEvents, sameEvent) {
		t.Fatalf("after a retry: %s\nwant %s first", got, fewEvents)
	}
	want := []string{`{"state":"queued"`, `{"state":"running"`, `"a \"quoted\"`, `{"n":1.5`, `[]`, `{"state":"failed"`}
	for i, e := range got[6:] {
		if !strings.HasPrefix(string(e.Data), want[i]) {
			t.Fatalf("second run's event %d: %s, want %s...", i, e.Data, want[i])
		}
	}
}

// allEvents reads every event of job id, page by page.
func (f *fixture) allEvents(t *testing.T, id string) []job.Event {
	t.Helper()
	var all []job.Event
	after := ""
	for {
		page, err := f.store.Events(t.Context(), "acme", id, false, after, 0)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, page...)
		if len(page) < job.EventsPage {
			return all
		}
		after = page[len(page)-1].ID
	}
}

func sameEvent(a, b job.Event) bool {
	return a.ID == b.ID && a.Type == b.Type && string(a.Data) == string(b.Data)
}
