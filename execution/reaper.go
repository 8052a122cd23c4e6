package execution

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/leasehold/leasehold/internal/store"
	"github.com/leasehold/leasehold/ratelimit/usage"
)

// Reaper does the time-driven work of its queues, each duty by name: it
// rescues the executions whose lease expired (their owner is gone: the
// job is retried, spending an attempt, or cancelled if a cancel was
// requested), promotes due retries and delayed jobs to ready, times out
// waits, expires jobs past their max_wait, deletes the records of terminal
// jobs whose retention has ended, and folds the events of jobs that ended
// a while ago into their hashes (fold). It finds the due work through the
// store (store.FindDue), which only reads; each duty checks its jobs
// again. Every claim does the same work for the candidates it looks at;
// the reaper makes sure it happens when nobody claims. A Worker runs one,
// as one of its services (service.go).
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

// runOnce makes one pass over every queue: its due work (reap), then its
// folds. A full batch of either (a burst of retries, of jobs whose
// retention ended) is followed by the next one at once. A failure is
// logged and ends that step: the next pass tries again.
func (r *Reaper) runOnce(ctx context.Context) {
	for _, q := range r.queues {
		r.batches(ctx, q, "reap", func(ctx context.Context) (bool, error) { return r.reap(ctx, q) })
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

// A duty of the reaper: it does one kind of q's due work, found in due.
type duty struct {
	name string
	do   func(ctx context.Context, q *queue, p store.DueParams, due store.DueWork) error
}

// duties are the reaper's duties, in the order a claim does them to a job
// (a lease expired may leave a retry; a job expired is not promoted).
var duties = []duty{
	{"rescue lost executions", rescueLost},
	{"expire jobs past max_wait", expireOverdue},
	{"promote due retries", promoteDue},
	{"time out waits", timeOutWaits},
	{"delete jobs past retention", deleteRetired},
}

// reap finds q's due work and does each duty of it. A duty that fails
// does not keep the others from theirs. more says a batch of due work was
// full: reap again at once.
func (r *Reaper) reap(ctx context.Context, q *queue) (more bool, err error) {
	due, err := q.st.FindDue(ctx, q.name)
	if err != nil {
		return false, err
	}
	p := q.dueParams()
	var errs []error
	for _, d := range duties {
		if err := d.do(ctx, q, p, due); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", d.name, err))
		}
	}
	return due.Full, errors.Join(errs...)
}

// dueParams is how q's due work is done.
func (q *queue) dueParams() store.DueParams {
	p := store.DueParams{Queue: q.name, Retention: q.retention, Backoff: q.backoff(1)}
	if q.usageTTL > 0 {
		p.UsageDropAt = usage.DropAt(time.Now(), q.usageTTL)
	}
	return p
}

func rescueLost(ctx context.Context, q *queue, p store.DueParams, due store.DueWork) error {
	n, err := q.st.RescueLost(ctx, p, due.Lost)
	q.metrics.reapedLeases(ctx, q.name, true, n)
	return err
}

func expireOverdue(ctx context.Context, q *queue, p store.DueParams, due store.DueWork) error {
	lanes, err := q.st.ExpireOverdue(ctx, p, due.Overdue)
	q.metrics.expiredJobs(ctx, q.name, lanes)
	return err
}

func promoteDue(ctx context.Context, q *queue, p store.DueParams, due store.DueWork) error {
	_, err := q.st.PromoteDue(ctx, p, due.Retries)
	return err
}

func timeOutWaits(ctx context.Context, q *queue, p store.DueParams, due store.DueWork) error {
	_, err := q.st.TimeOutWaits(ctx, p, due.Waits)
	return err
}

func deleteRetired(ctx context.Context, q *queue, p store.DueParams, due store.DueWork) error {
	_, err := q.st.DeleteRetired(ctx, p, due.Retired)
	return err
}
