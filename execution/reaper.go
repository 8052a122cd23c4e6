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
// it happens when nobody claims. A Worker runs one.
type Reaper struct {
	queues    []*queue
	interval  time.Duration
	foldAfter time.Duration // Config.FoldAfter
	log       *slog.Logger
}

// Run reaps every interval, jittered so a fleet's reapers spread out,
// until ctx is done.
func (r *Reaper) Run(ctx context.Context) error {
	for {
		t := time.NewTimer(r.interval/2 + rand.N(r.interval+1))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		for _, q := range r.queues {
			// A full batch of due work (a burst of retries, of jobs whose
			// retention ended) is followed by the next one at once.
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
}
