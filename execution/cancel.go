package execution

import (
	"context"
	"fmt"
	"time"

	"github.com/leasehold/leasehold/cancel"
	"github.com/leasehold/leasehold/internal/store"
	"github.com/leasehold/leasehold/job"
)

// CancelJob cancels job id of tenant (any tenant's when admin), the one way
// the API and embedders do it. The job's record comes first, as the truth:
// a queued or retrying job ends cancelled at once, a running one gets
// cancel_requested. Then, for a running job, the TTL'd flag its owner reads
// at every heartbeat, and the NATS message that reaches the owner at once.
// It does both on every cancel of a running job, so calling it again after
// a failed flag write completes the request.
//
// It returns the job as it stands, and job.ErrConflict (with the job) when
// the job already ended otherwise than cancelled.
func CancelJob(ctx context.Context, jobs *store.Store, flags *cancel.Flags, tenant, id string, admin bool) (job.Job, error) {
	j, err := jobs.Cancel(ctx, tenant, id, admin)
	if err != nil {
		return j, err
	}
	if j.State == job.StateRunning && j.CancelRequested {
		if err := flags.Request(ctx, j.ID, flagTTL(j)); err != nil {
			return j, err
		}
	}
	return j, nil
}

// flagTTL is how long a cancel flag must live: as long as the job can
// still run, which is its timeout for the current attempt and every one
// left, plus time for backoff; at least an hour.
func flagTTL(j job.Job) time.Duration {
	left := time.Duration(max(j.MaxAttempts-j.Attempt, 0) + 1)
	return max(time.Hour, j.Timeout*left+10*time.Minute)
}

// cancelRequested is the watcher's Requested: whether the record of each
// job id running here has cancel_requested. A flag without it is one
// written after the job was retried (the request stopped the run before):
// it must not stop this one. A job no longer running here is not.
func (w *Worker) cancelRequested(ctx context.Context, ids []string) ([]bool, error) {
	queues := map[string]string{}
	w.mu.Lock()
	for e := range w.running {
		queues[e.JobID] = e.Queue
	}
	w.mu.Unlock()
	jobs := make([]store.QueuedJob, len(ids))
	for i, id := range ids {
		jobs[i] = store.QueuedJob{Queue: queues[id], ID: id}
	}
	out, err := w.st.JobsCancelRequested(ctx, jobs)
	if err != nil {
		return nil, fmt.Errorf("execution: %w", err)
	}
	return out, nil
}
