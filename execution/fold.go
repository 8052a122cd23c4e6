package execution

import (
	"context"
	"fmt"
	"time"

	"github.com/leasehold/leasehold/internal/store"
)

// DefaultFoldAfter is the default Config.FoldAfter.
const DefaultFoldAfter = time.Minute

// fold folds up to store.FoldBatch of the queue's jobs that ended at least
// after ago, then packs them (store.FoldJobs, store.PackJobs): each one's
// events and long fields go to its folded key and its hash is written
// anew, a listpack, and then both become its folded key alone. It takes
// them from the retired index after q.folds, where the queue's last fold
// got to. It reports whether there may be more.
//
// A reader of an ended job's events finds them in the stream or, once
// folded, in its folded key (job.Store.Events). after keeps the fold away
// from the readers that wait for a job's next events: they wait for a job
// that has not ended, and the step that ends it appends its last event,
// so they have it long before.
func (q *queue) fold(ctx context.Context, after time.Duration) (bool, error) {
	res, err := q.st.FoldJobs(ctx, store.FoldParams{Queue: q.name, Retention: q.retention, After: after, Cursor: q.folds})
	q.folds = res.Next
	if err != nil {
		return false, err
	}
	// The packing comes after the fold's progress is kept: a job it
	// leaves is folded, not lost, and the next fold goes on.
	return res.More, q.pack(ctx, res.Folded)
}

// pack packs ids, jobs a fold just folded.
func (q *queue) pack(ctx context.Context, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	if err := q.st.PackJobs(ctx, q.name, ids); err != nil {
		return fmt.Errorf("execution: %w", err)
	}
	return nil
}
