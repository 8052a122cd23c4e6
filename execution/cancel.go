package execution

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

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
	queues := map[string]*queue{}
	w.mu.Lock()
	for e := range w.running {
		queues[e.JobID] = e.q
	}
	w.mu.Unlock()
	cmds := make([]*redis.StringCmd, len(ids))
	if _, err := w.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range ids {
			if q := queues[id]; q != nil {
				cmds[i] = p.HGet(ctx, q.keys.Job(q.name, id), "cancel_requested")
			}
		}
		return nil
	}); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("execution: read cancel_requested: %w", err)
	}
	out := make([]bool, len(ids))
	for i, cmd := range cmds {
		out[i] = cmd != nil && cmd.Val() == "1"
	}
	return out, nil
}
