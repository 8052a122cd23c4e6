package job

import (
	"context"
	"errors"
)

// RetryFilter selects the jobs RetryAll moves.
type RetryFilter struct {
	// Tenant is the caller, whose jobs are retried. With Admin it is a
	// filter instead: one tenant's jobs, or every tenant's when "".
	Tenant string
	Admin  bool
	State  State  // failed, cancelled or expired; "" = failed
	Kind   string // "" = any
	Queue  string // "" = every queue
	// Max bounds how many jobs one call moves, at most (and by default)
	// RetryPageMax.
	Max int
	// Cap is the caller's cap on its jobs not ended, which a retry counts
	// against like a submission (RetryWithin); the admin's are not capped.
	Cap Cap
	// Admit, when set, spends the caller's submission rate, one unit per
	// job moved: it is called with how many jobs are about to move and
	// returns how many may (at most n), and why when fewer.
	Admit func(ctx context.Context, n int) (int, error)
	// Cursor continues a bulk retry where the call before stopped (its
	// RetryPage.Next); "" starts one.
	Cursor string
}

// RetryPageMax is the most jobs one RetryAll call moves. With the most
// index entries it reads (internal/store), it bounds a call's time and
// memory whatever the tenant has; RetryPage.Next continues.
const RetryPageMax = 1000

// ErrRetryRunning: a bulk retry of the same caller is running (on any API
// process); RetryAll moved nothing.
var ErrRetryRunning = errors.New("job: a bulk retry of this tenant is already running")

// Validate refuses a filter RetryAll cannot serve, naming each bad field.
func (f RetryFilter) Validate() error {
	var v ValidationError
	switch {
	case !f.Admin && ValidateTenant(f.Tenant) != nil:
		return ErrNotFound
	case f.Admin && f.Tenant != "" && ValidateTenant(f.Tenant) != nil:
		v.Add("tenant", "must match %s", tenantPattern)
	}
	switch f.State {
	case "", StateFailed, StateCancelled, StateExpired:
	default:
		v.Add("state", "must be failed, cancelled or expired")
	}
	if f.Kind != "" && !kindPattern.MatchString(f.Kind) {
		v.Add("kind", "must match %s", kindPattern)
	}
	if f.Queue != "" && !queuePattern.MatchString(f.Queue) {
		v.Add("queue", "must match %s", queuePattern)
	}
	return v.Err()
}

// RetryPage is what one RetryAll call did.
type RetryPage struct {
	// Moved counts the jobs moved in each queue (queues with none are left
	// out).
	Moved map[string]int
	// Next continues the bulk retry (RetryFilter.Cursor); "" when every
	// job it selects has been looked at.
	Next string
}
