package execution

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/redis/go-redis/v9"
)

// Reaper does the time-driven work of its queues: it finalises executions
// whose lease expired (their owner is gone: the job is retried, spending an
// attempt, or cancelled if a cancel was requested), moves due retries and
// delayed jobs to ready, expires jobs past their max_wait, and deletes the
// records of terminal jobs whose retention has ended, and folds the events
// of jobs that ended a while ago into their hashes (fold). Every claim
// does the same work for the candidates it looks at; the reaper makes sure
// it happens when nobody claims. A Worker runs one, as one of its services
// (service.go).
type Reaper struct {
	queues    []*queue
	interval  time.Duration // between passes, jittered: Config.Heartbeat
	foldAfter time.Duration // Config.FoldAfter
	log       *slog.Logger
}

// Run makes a pass every interval, jittered so a fleet's reapers spread
// out, until ctx is done.
func (r *Reaper) Run(ctx context.Context) error {
	for {
		t := time.NewTimer(r.interval/2 + rand.N(r.interval+1))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		r.runOnce(ctx)
	}
}

// runOnce makes one pass over every queue: what older versions left (the
// turns of its lanes, internal/scripts/fair_unband.lua, and its index of
// all jobs: drainAll), its due work (queue.reap), then its folds. A full
// batch of any of the last three (a burst of retries, of jobs whose
// retention ended) is followed by the next one at once. A failure is
// logged and ends that step (the unband's, the queue's part of the pass):
// the next pass tries again.
func (r *Reaper) runOnce(ctx context.Context) {
	for _, q := range r.queues {
		if err := unbandScript.Run(ctx, q.rdb, []string{q.keys.QueueReady(q.name)}, dueBatch).Err(); err != nil {
			if ctx.Err() == nil {
				r.log.WarnContext(ctx, "unband failed", "queue", q.name, "error", err)
			}
			continue
		}
		r.batches(ctx, q, "drain of the index of all jobs", q.drainAll)
		r.batches(ctx, q, "reap", q.reap)
		r.batches(ctx, q, "fold", func(ctx context.Context) (bool, error) { return q.fold(ctx, r.foldAfter) })
	}
}

// batches runs step, one batch of q's work, again while it says there may
// be more, until it fails (logged as what failed) or ctx is done.
func (r *Reaper) batches(ctx context.Context, q *queue, what string, step func(context.Context) (bool, error)) {
	for ctx.Err() == nil {
		more, err := step(ctx)
		if err != nil && ctx.Err() == nil {
			r.log.WarnContext(ctx, what+" failed", "queue", q.name, "error", err)
		}
		if err != nil || !more {
			return
		}
	}
}

// drainBatch is how many entries of a queue's index of all jobs one
// drainAll takes out: a ZREM of a few thousand blocks Redis for a
// millisecond or two, where one of the index's millions would block it for
// seconds, past every lease.
const drainBatch = 2000

// drainAll takes out of q's index of all jobs up to drainBatch entries
// over an hour old, and reports whether there may be more. Versions before
// issue 23's waypoint (docs/operations.md) listed every job there too,
// which nothing reads now: it empties once no such version runs. Not the
// entries of the last hour, which such a version's submit reads when
// go-redis resends it (job_submit.lua of that version). The entries are
// read, then removed by member, so an older version's ZADD or ZREM in
// between moves nothing the second step takes.
func (q *queue) drainAll(ctx context.Context) (bool, error) {
	all := q.keys.QueueAllJobs(q.name)
	old, err := q.rdb.ZRangeArgs(ctx, redis.ZRangeArgs{Key: all, ByScore: true, Start: "-inf",
		Stop: time.Now().Add(-time.Hour).UnixMilli(), Count: drainBatch}).Result()
	if err != nil || len(old) == 0 {
		return false, err
	}
	if err := q.rdb.ZRem(ctx, all, old).Err(); err != nil {
		return false, err
	}
	return len(old) == drainBatch, nil
}
