package execution

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"time"
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
// all jobs), its due work (queue.reap), then its folds. A full batch of
// either of the last two (a burst of retries, of jobs whose retention
// ended) is followed by the next one at once. A failure is logged and
// ends that queue's part of the pass: the next pass tries again.
//
// Versions before issue 23's waypoint (docs/operations.md) listed a
// queue's jobs in an index of all jobs too, which nothing reads now. A
// pass drops its entries over an hour old, so it empties once no such
// version runs: not younger ones, which such a version's submit reads
// when go-redis resends it (job_submit.lua of that version).
func (r *Reaper) runOnce(ctx context.Context) {
	for _, q := range r.queues {
		drained := strconv.FormatInt(time.Now().Add(-time.Hour).UnixMilli(), 10)
		err := unbandScript.Run(ctx, q.rdb, []string{q.keys.QueueReady(q.name)}, dueBatch).Err()
		if err == nil {
			err = q.rdb.ZRemRangeByScore(ctx, q.keys.QueueAllJobs(q.name), "-inf", drained).Err()
		}
		if err != nil {
			if ctx.Err() == nil {
				r.log.WarnContext(ctx, "cleaning up after older versions failed", "queue", q.name, "error", err)
			}
			continue
		}
		for ctx.Err() == nil {
			more, err := q.reap(ctx)
			if err != nil && ctx.Err() == nil {
				r.log.WarnContext(ctx, "reap failed", "queue", q.name, "error", err)
			}
			if err != nil || !more {
				break
			}
		}
		for ctx.Err() == nil {
			more, err := q.fold(ctx, r.foldAfter)
			if err != nil && ctx.Err() == nil {
				r.log.WarnContext(ctx, "fold failed", "queue", q.name, "error", err)
			}
			if err != nil || !more {
				break
			}
		}
	}
}
