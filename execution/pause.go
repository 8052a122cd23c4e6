package execution

import (
	"context"
	"sync/atomic"

	"github.com/leasehold/leasehold/internal/store"
)

// paused is a worker's copy of the set of paused queues that the API
// writes (job.Store.Pause), read with the limits every heartbeat interval
// and before the first claim: a worker stops claiming from a queue within
// one interval of its pause, and one that starts while it is paused never
// claims from it. Running executions are not touched, and the reaper goes
// on with the queue's due work.
type paused struct {
	set atomic.Pointer[map[string]bool]
}

func (p *paused) has(queue string) bool {
	set := p.set.Load()
	return set != nil && (*set)[queue]
}

func (p *paused) refresh(ctx context.Context, st *store.Store) error {
	set, err := st.PausedQueues(ctx)
	if err != nil {
		return err
	}
	p.set.Store(&set)
	return nil
}

// refreshShared reads what the API sets for every worker: the concurrency
// limits and the paused queues.
func (w *Worker) refreshShared(ctx context.Context) error {
	ks := w.queues[0].keys
	if err := w.limits.refresh(ctx, w.rdb, ks); err != nil {
		return err
	}
	return w.paused.refresh(ctx, w.st)
}
