package execution

import (
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/job"
)

// One pass of the reaper, alone, with no worker running: it finalises an
// expired lease, promotes more due jobs than one batch holds (the next
// batch follows at once), and deletes a record past its retention,
// giving back its retained bytes.
func TestReaperRunOnce(t *testing.T) {
	f := newQueueFixture(t, Config{LeaseTTL: time.Minute, Backoff: func(int) time.Duration { return time.Hour }})
	q := f.q
	lost := f.submit("acme", job.Submission{MaxAttempts: 3})
	if execs, _, _, err := q.claim(t.Context(), f.w.ID(), 1); err != nil || len(execs) != 1 {
		t.Fatalf("claim: %v, %v", execs, err)
	}
	f.due(q.keys.QueueLeases(q.name), lost)
	var delayed []string
	for range dueBatch + 6 {
		id := f.submit("acme", job.Submission{Delay: job.Duration(time.Hour)})
		f.due(q.keys.QueueScheduled(q.name), id)
		delayed = append(delayed, id)
	}
	ended := f.submit("acme", job.Submission{})
	if _, err := f.store.Cancel(t.Context(), "acme", ended, false); err != nil {
		t.Fatal(err)
	}
	f.due(q.keys.QueueRetired(q.name), ended)

	f.w.reaper.runOnce(t.Context())

	if j, err := f.store.Get(t.Context(), "acme", lost, false); err != nil || j.State != job.StateRetrying {
		t.Errorf("the job of the expired lease: %+v, %v; want retrying", j, err)
	}
	for _, id := range delayed {
		if j, err := f.store.Get(t.Context(), "acme", id, false); err != nil || j.State != job.StateQueued {
			t.Fatalf("a due delayed job: %+v, %v; want queued (%d due, a batch is %d)", j, err, len(delayed), dueBatch)
		}
	}
	if n, err := f.rdb.Exists(t.Context(), q.keys.Job(q.name, ended)).Result(); err != nil || n != 0 {
		t.Errorf("the record past its retention: %d keys, %v; want deleted", n, err)
	}
	if err := f.rdb.HGet(t.Context(), q.keys.QueueRetained(q.name, "acme"), ended).Err(); !errors.Is(err, redis.Nil) {
		t.Errorf("the record past its retention: still charged to its tenant's retained bytes (%v)", err)
	}
}
