package lease

import (
	"context"
	"errors"
	"time"
)

// Semaphore guards an upstream with a fleet-wide limit: at most Limit
// holders, across every process that shares the Redis, run at once. It is
// the lease machinery without the job runner, for code that calls an LLM
// API directly. A Leasehold worker takes its jobs' concurrency slots from
// the same lease set, so a semaphore on key "model:gpt-4o" and jobs naming
// that key share one count: give the semaphore the limit the jobs have
// (LEASEHOLD_LIMITS), as every caller enforces the limit it is given.
//
// Do (and Client.Acquire) does not honour a key's budget: no rpm, tpm,
// throttle or effective limit holds it back. It is given its limit by its
// caller and reads nothing the API sets, and a budget's reservation must
// be settled with how the call ended (served, or refused by the upstream)
// and the tokens it spent, which Do's fn does not report. Its holders do
// take the key's slots, so jobs' claims count them against the key's
// limit and effective limit. Wait honours the budget it is given
// (WaitConfig.Budget), and its Permit settles it (Permit.Settle).
type Semaphore struct {
	c     *Client
	key   string
	limit int
	ttl   time.Duration
}

// Semaphore returns a semaphore of limit slots on key, whose leases live for
// ttl unless renewed (every ttl/3 while held).
func (c *Client) Semaphore(key string, limit int, ttl time.Duration) *Semaphore {
	return &Semaphore{c: c, key: key, limit: limit, ttl: ttl}
}

// InUse returns how many slots are held now.
func (s *Semaphore) InUse(ctx context.Context) (int, error) { return s.c.InUse(ctx, s.key) }

// Do takes a slot for holder, runs fn while keeping the lease alive, and
// releases the slot when fn returns. When no slot is free it returns a
// *FullError at once, with the time to retry. fn's context is cancelled
// with cause ErrLost if the lease is lost while fn runs; Do then returns an
// error that wraps ErrLost.
func (s *Semaphore) Do(ctx context.Context, holder string, fn func(ctx context.Context, l Lease) error) error {
	l, err := s.c.Acquire(ctx, s.key, holder, s.limit, s.ttl)
	if err != nil {
		return err
	}
	fnCtx, stopFn := context.WithCancelCause(ctx)
	defer stopFn(nil)
	keeper := s.c.Keeper(l, 0, stopFn)
	keepCtx, stopKeeping := context.WithCancel(ctx)
	kept := make(chan error, 1)
	go func() { kept <- keeper.Run(keepCtx) }()

	err = fn(fnCtx, l)

	stopKeeping()
	lostErr := <-kept
	// Release even when ctx is cancelled or the lease was lost: a slot left
	// behind stays taken until its TTL runs out, and a release removes only
	// this holder's own member.
	rctx, stop := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer stop()
	releaseErr := s.c.Release(rctx, keeper.Lease())
	if lostErr != nil {
		return errors.Join(lostErr, err)
	}
	if err == nil {
		err = releaseErr
	}
	return err
}
