package execution

import (
	"context"
	"log/slog"
	"math/rand/v2"
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

// runOnce makes one pass over every queue: its due work (queue.reap),
// then its folds. A full batch of either (a burst of retries, of jobs whose
// retention ended) is followed by the next one at once. A failure is
// logged and ends that step: the next pass tries again.
func (r *Reaper) runOnce(ctx context.Context) {
	for _, q := range r.queues {
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
