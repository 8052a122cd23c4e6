package execution

import (
	"errors"
	"fmt"
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

// TestReaperPlacesAnOldBandedTurnAgain: a version before priority left the
// ready set scored a lane's turn with a priority band above it
// (internal/scripts/fair.lua), which sorts the lane behind every other,
// and a submit to a lane with jobs does not read its turn. The reaper's
// pass writes it as its turn alone, and leaves the other lanes' turns.
func TestReaperPlacesAnOldBandedTurnAgain(t *testing.T) {
	f := newQueueFixture(t, Config{})
	q, ctx := f.q, t.Context()
	f.submit("acme", job.Submission{})
	f.submit("globex", job.Submission{})
	ready := q.keys.QueueReady(q.name)
	before, err := f.rdb.ZRangeWithScores(ctx, ready, 0, -1).Result()
	if err != nil || len(before) != 2 {
		t.Fatalf("the ready set: %v, %v; want two lanes", before, err)
	}
	const band = 1 << 43
	old := before[0]
	f.rdb.ZAdd(ctx, ready, redis.Z{Score: old.Score + 100*band, Member: old.Member})
	f.submit("acme", job.Submission{})

	f.w.reaper.runOnce(ctx)

	after, err := f.rdb.ZRangeWithScores(ctx, ready, 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(after) != 2 || after[0] != before[0] || after[1] != before[1] {
		t.Errorf("the ready set after a pass: %v, want %v", after, before)
	}
}

// TestReaperDrainsTheIndexOfAllJobs: versions before issue 23's waypoint
// listed every job in the queue's index of all jobs too. A drain takes out
// at most drainBatch entries over an hour old, and a pass drains until
// none is left; the younger ones stay, which such a version's submit
// reads when go-redis resends it.
func TestReaperDrainsTheIndexOfAllJobs(t *testing.T) {
	f := newQueueFixture(t, Config{})
	q, ctx := f.q, t.Context()
	all := q.keys.QueueAllJobs(q.name)
	now := time.Now()
	entries := []redis.Z{{Score: float64(now.Add(-time.Minute).UnixMilli()), Member: "young"}}
	for i := range 2*drainBatch + 5 {
		entries = append(entries, redis.Z{Score: float64(now.Add(-2 * time.Hour).UnixMilli()), Member: fmt.Sprint("old-", i)})
	}
	f.rdb.ZAdd(ctx, all, entries...)

	if more, err := q.drainAll(ctx); err != nil || !more {
		t.Fatalf("the first drain: more %v, %v; want more", more, err)
	}
	if n := f.rdb.ZCard(ctx, all).Val(); n != int64(len(entries)-drainBatch) {
		t.Errorf("after one drain %d entries are left, want %d", n, len(entries)-drainBatch)
	}
	f.w.reaper.runOnce(ctx)
	if left := f.rdb.ZRange(ctx, all, 0, -1).Val(); len(left) != 1 || left[0] != "young" {
		t.Errorf("the index of all jobs after a pass: %d entries, want [young]", len(left))
	}
}
