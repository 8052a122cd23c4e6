package execution

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
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

// A pass of the reaper expires a job that waited past its max_wait
// without starting, and counts it for the keys it named.
func TestReaperExpiresJobsPastMaxWait(t *testing.T) {
	f := newQueueFixture(t, Config{})
	q := f.q
	id := f.submit("acme", job.Submission{MaxWait: job.Duration(time.Hour)})
	f.due(q.keys.QueueDeadlines(q.name), id)

	f.w.reaper.runOnce(t.Context())

	j, err := f.store.Get(t.Context(), "acme", id, false)
	if err != nil || j.State != job.StateExpired || j.Error == nil || j.Error.Code != "max_wait_exceeded" {
		t.Fatalf("the job past its max_wait: %+v, %v; want expired (max_wait_exceeded)", j, err)
	}
	if n := f.rdb.ZCard(t.Context(), q.keys.QueueReady(q.name)).Val(); n != 0 {
		t.Errorf("its lane is still in the ready set (%d lanes)", n)
	}
}

// A pass of the reaper makes ready a waiting job whose wait timed out, and
// its next execution is told so; a wait not yet due is left waiting.
func TestReaperTimesOutWaits(t *testing.T) {
	f := newQueueFixture(t, Config{})
	q := f.q
	ids := []string{f.submit("acme", job.Submission{}), f.submit("acme", job.Submission{})}
	execs, _, _, err := q.claim(t.Context(), f.w.ID(), 2)
	if err != nil || len(execs) != 2 {
		t.Fatalf("claim: %v, %v", execs, err)
	}
	fs := make([]*finishing, len(execs))
	for i, e := range execs {
		fs[i] = &finishing{e: e, o: outcome{state: StateWaiting, wait: &WaitError{For: "approval", Timeout: time.Hour}}}
	}
	finishAll(t.Context(), f.rdb, fs)
	for _, fin := range fs {
		if fin.err != nil || fin.state != job.StateWaiting {
			t.Fatalf("finish to wait: %s, %v", fin.state, fin.err)
		}
	}
	f.due(q.keys.QueueScheduled(q.name), ids[0])

	f.w.reaper.runOnce(t.Context())

	j, err := f.store.Get(t.Context(), "acme", ids[0], false)
	if err != nil || j.State != job.StateQueued || j.Error == nil || j.Error.Code != "wait_timeout" {
		t.Fatalf("the job whose wait timed out: %+v, %v; want queued (wait_timeout)", j, err)
	}
	if j, err := f.store.Get(t.Context(), "acme", ids[1], false); err != nil || j.State != job.StateWaiting {
		t.Fatalf("the job whose wait has an hour to go: %+v, %v; want waiting", j, err)
	}
	execs, _, _, err = q.claim(t.Context(), f.w.ID(), 2)
	if err != nil || len(execs) != 1 || execs[0].JobID != ids[0] || execs[0].resume.Signal == nil ||
		!execs[0].resume.Signal.TimedOut {
		t.Fatalf("the next claim: %v, %v; want the job told its wait timed out", execs, err)
	}
}

// A pass of the reaper finds the due work through the store and does each
// duty by name: it never runs the claim script.
func TestReaperIsNotAClaim(t *testing.T) {
	f := newQueueFixture(t, Config{})
	q := f.q
	id := f.submit("acme", job.Submission{Delay: job.Duration(time.Hour)})
	f.due(q.keys.QueueScheduled(q.name), id)
	sent := &scriptLog{}
	f.rdb.AddHook(sent)

	f.w.reaper.runOnce(t.Context())

	if j, err := f.store.Get(t.Context(), "acme", id, false); err != nil || j.State != job.StateQueued {
		t.Fatalf("the due delayed job: %+v, %v; want queued", j, err)
	}
	if sent.ran(ClaimScript.Hash()) || !sent.ran(PeekScript.Hash()) {
		t.Fatalf("the reaper's scripts: %v; want the peek (finding) and no claim", sent.hashes)
	}
}

// scriptLog records the hash of each script a client runs.
type scriptLog struct {
	mu     sync.Mutex
	hashes []string
}

func (l *scriptLog) add(cmds ...redis.Cmder) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range cmds {
		if args := c.Args(); len(args) > 1 && args[0] == "evalsha" {
			l.hashes = append(l.hashes, fmt.Sprint(args[1]))
		}
	}
}

func (l *scriptLog) ran(hash string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Contains(l.hashes, hash)
}

func (l *scriptLog) DialHook(next redis.DialHook) redis.DialHook { return next }

func (l *scriptLog) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		l.add(cmd)
		return next(ctx, cmd)
	}
}

func (l *scriptLog) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		l.add(cmds...)
		return next(ctx, cmds)
	}
}
