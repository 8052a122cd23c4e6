package execution

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/job"
)

// One pass of the reaper, alone, with no worker running: it finalises an
// expired lease, promotes more due jobs than one batch holds (the next
// batch follows at once), and deletes a record past its retention.
func TestReaperRunOnce(t *testing.T) {
	rdb := testenv.Redis(t).Client(t)
	prefix := testenv.Prefix(t)
	store, err := job.NewStore(rdb, job.Config{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	w, err := NewWorker(rdb, Config{Prefix: prefix, LeaseTTL: time.Minute, Backoff: func(int) time.Duration { return time.Hour }})
	if err != nil {
		t.Fatal(err)
	}
	q := w.queues[0]
	submit := func(s job.Submission) string {
		t.Helper()
		s.Kind = "noop"
		j, _, err := store.Submit(t.Context(), "acme", s, "")
		if err != nil {
			t.Fatal(err)
		}
		return j.ID
	}
	past := func(key, id string) {
		t.Helper()
		if err := rdb.ZAddXX(t.Context(), key, redis.Z{Score: 1, Member: id}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	lost := submit(job.Submission{MaxAttempts: 3})
	if execs, _, _, err := q.claim(t.Context(), w.ID(), 1); err != nil || len(execs) != 1 {
		t.Fatalf("claim: %v, %v", execs, err)
	}
	past(q.keys.QueueLeases(q.name), lost)
	var delayed []string
	for range dueBatch + 6 {
		id := submit(job.Submission{Delay: job.Duration(time.Hour)})
		past(q.keys.QueueScheduled(q.name), id)
		delayed = append(delayed, id)
	}
	ended := submit(job.Submission{})
	if _, err := store.Cancel(t.Context(), "acme", ended, false); err != nil {
		t.Fatal(err)
	}
	past(q.keys.QueueRetired(q.name), ended)

	w.reaper.runOnce(t.Context())

	if j, err := store.Get(t.Context(), "acme", lost, false); err != nil || j.State != job.StateRetrying {
		t.Errorf("the job of the expired lease: %+v, %v; want retrying", j, err)
	}
	for _, id := range delayed {
		if j, err := store.Get(t.Context(), "acme", id, false); err != nil || j.State != job.StateQueued {
			t.Fatalf("a due delayed job: %+v, %v; want queued (%d due, a batch is %d)", j, err, len(delayed), dueBatch)
		}
	}
	if n, err := rdb.Exists(t.Context(), q.keys.Job(q.name, ended)).Result(); err != nil || n != 0 {
		t.Errorf("the record past its retention: %d keys, %v; want deleted", n, err)
	}
}
