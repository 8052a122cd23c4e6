package schedule

import (
	"context"
	"time"

	"github.com/leasehold/leasehold/job"
)

// RunOnce is runOnce, for tests of one read of the due index.
func (s *Scheduler) RunOnce(ctx context.Context) (int, error) {
	n, _, err := s.runOnce(ctx)
	return n, err
}

// OnFire sets the test signal: f gets every fire's result.
func (s *Scheduler) OnFire(f func(Result)) { s.fired = f }

// SubmitOnly runs the first step of a fire of tenant's schedule name at
// its current due time and not the second: what a process that dies
// between the two leaves behind.
func (s *Store) SubmitOnly(ctx context.Context, tenant, name string) (job.Job, error) {
	sch, err := s.Get(ctx, tenant, name)
	if err != nil {
		return job.Job{}, err
	}
	key := fireKey(sch)
	j, _, err := s.submit(ctx, sch, sch.NextRunAt.UTC(), key, job.Cap{})
	return j, err
}

// AdvanceStale runs the second step of a fire of due time due, to next, as
// a scheduler that read the schedule before it moved on (and was paused
// meanwhile) would.
func (s *Store) AdvanceStale(ctx context.Context, tenant, name string, due, next time.Time) error {
	sch, err := s.Get(ctx, tenant, name)
	if err != nil {
		return err
	}
	_, err = s.moveOn(ctx, sch, due, next, next, job.Job{}, Idle)
	return err
}
