package execution

import (
	"errors"
	"testing"
	"time"

	"github.com/leasehold/leasehold/job"
)

// TestBatchesFenceEachExecutionAlone claims three jobs in one claim script
// and finishes them in one finish script, where the first has lost its
// job to the reaper in between: only its finish is refused, the others
// are written, and the refused one changes nothing of its job.
func TestBatchesFenceEachExecutionAlone(t *testing.T) {
	// Leases long enough that only the one the test ends runs out, however
	// slow the machine.
	f := newQueueFixture(t, Config{LeaseTTL: time.Minute, Backoff: func(int) time.Duration { return time.Hour }})
	rdb, store, w, q := f.rdb, f.store, f.w, f.q
	for range 3 {
		f.submit("acme", job.Submission{MaxAttempts: 3})
	}
	execs, _, _, err := q.claim(t.Context(), w.ID(), 3)
	if err != nil || len(execs) != 3 {
		t.Fatalf("claim: %d executions, %v; want 3 in one claim", len(execs), err)
	}

	// The first one's lease runs out (its expiry moved to the past), and
	// the reaper finalises it: its job waits for a retry.
	lost := execs[0]
	f.due(q.keys.QueueLeases(q.name), lost.JobID)
	w.reaper.runOnce(t.Context())
	if j, err := store.Get(t.Context(), "acme", lost.JobID, false); err != nil || j.State != job.StateRetrying {
		t.Fatalf("the reaper did not take the first job back: %+v, %v", j, err)
	}

	fs := make([]*finishing, len(execs))
	for i, e := range execs {
		fs[i] = &finishing{e: e, o: outcome{state: "succeeded", result: []byte(`"done"`)}}
	}
	finishAll(t.Context(), rdb, fs)
	if !errors.Is(fs[0].err, ErrNotOwner) {
		t.Errorf("finish of the lost execution: state %q, err %v; want ErrNotOwner", fs[0].state, fs[0].err)
	}
	for _, f := range fs[1:] {
		if f.err != nil || f.state != job.StateSucceeded {
			t.Errorf("finish of %s: state %q, err %v; want succeeded", f.e.JobID, f.state, f.err)
		}
	}
	j, err := store.Get(t.Context(), "acme", lost.JobID, false)
	if err != nil || j.State != job.StateRetrying || j.Result != nil {
		t.Errorf("the lost execution's job after its refused finish: %+v, %v; want retrying with no result", j, err)
	}
}
