package job

import (
	"errors"
	"fmt"
	"time"
)

// Errors callers branch on.
var (
	// ErrNotFound: no such job, or one another tenant owns (the two are
	// indistinguishable on purpose).
	ErrNotFound = errors.New("job: not found")
	// ErrConflict: the job already ended succeeded, failed or expired, so
	// it cannot be cancelled. Cancel returns the job with it.
	ErrConflict = errors.New("job: already finished")
	// ErrIdempotencyConflict: the Idempotency-Key was used before with a
	// different request.
	ErrIdempotencyConflict = errors.New("job: idempotency key reused with a different request")
	// ErrBadCursor: a List cursor or an event id that this package did not
	// hand out.
	ErrBadCursor = errors.New("job: bad cursor")
	// ErrBusy is wrapped by *BusyError.
	ErrBusy = errors.New("job: a concurrency key is full")
	// ErrOverCap is wrapped by *CapError and *QuotaError.
	ErrOverCap = errors.New("job: tenant over its cap of jobs not ended")
	// ErrNotRetryable: only a failed, cancelled or expired job can be
	// retried. Retry returns the job with it.
	ErrNotRetryable = errors.New("job: only a failed, cancelled or expired job can be retried")
	// ErrNotEnded: the job has not ended, so it cannot be deleted. Delete
	// returns the job with it.
	ErrNotEnded = errors.New("job: has not ended")
	// ErrDeleted: the Idempotency-Key stands for a job that was deleted.
	// A replay does not create it again: the client deleted it on purpose.
	ErrDeleted = errors.New("job: the job this idempotency key created was deleted")
)

// Defaults of the store's Config (internal/store).
const (
	DefaultRetention      = 7 * 24 * time.Hour
	DefaultIdempotencyTTL = 24 * time.Hour
)

// BusyError refuses a submission with on_busy "reject" because one of its
// concurrency keys had no room (live leases ≥ its limit). Nothing a client
// can see was stored.
type BusyError struct {
	Key string
	// Label is the limit or budget that applies to Key, as metrics name
	// it (scripts.Label): Key, or its prefix's wildcard.
	Label string
	// RetryAfter is when the key's earliest lease expires: the soonest a
	// slot frees up if its holder is gone; a holder that finishes frees
	// one sooner.
	RetryAfter time.Duration
}

func (e *BusyError) Error() string {
	return fmt.Sprintf("job: concurrency key %s is full; retry in %v", e.Key, e.RetryAfter)
}

func (e *BusyError) Unwrap() error { return ErrBusy }

// Cap bounds how many of one tenant's jobs may be not ended (queued,
// running or retrying) at once, and how many bytes its jobs Redis keeps
// may be charged, over some queues.
type Cap struct {
	// Max is the most jobs not ended a tenant may have; 0 = no cap.
	Max int64
	// MaxBytes is the most bytes a tenant's jobs, not ended and ended
	// within their retention, may be charged (a job's charge: its
	// submitted fields' bytes and 512 for what its keys cost besides);
	// 0 = no quota.
	MaxBytes int64
	// Queues are the queues whose jobs count; the submission's own queue
	// counts whether named or not.
	Queues []string
}

// Counts says whether c counts the tenant's jobs or bytes at all.
func (c Cap) Counts() bool { return c.Max > 0 || c.MaxBytes > 0 }

// CapError refuses a submission that would take its tenant past Cap.Max
// jobs not ended. Nothing a client can see was stored.
type CapError struct {
	Jobs int64 // the tenant's jobs not ended, as counted
	Max  int64
}

func (e *CapError) Error() string {
	return fmt.Sprintf("job: tenant has %d jobs not ended, the cap is %d", e.Jobs, e.Max)
}

func (e *CapError) Unwrap() error { return ErrOverCap }

// QuotaError refuses a submission or retry that would take its tenant past
// Cap.MaxBytes of retained jobs. Nothing a client can see was stored.
// It is over the cap too (ErrOverCap): a schedule's fire waits as it does
// for a full cap.
type QuotaError struct {
	Bytes int64 // the bytes the tenant's jobs are charged, as counted
	Max   int64
}

func (e *QuotaError) Error() string {
	return fmt.Sprintf("job: tenant's jobs hold %d bytes, the quota is %d", e.Bytes, e.Max)
}

func (e *QuotaError) Unwrap() error { return ErrOverCap }

// QueueStats counts a queue's jobs in the states that are still moving,
// and says whether the queue is paused.
type QueueStats struct {
	Name     string `json:"name"`
	Queued   int64  `json:"queued"`
	Running  int64  `json:"running"`
	Retrying int64  `json:"retrying"`
	Waiting  int64  `json:"waiting"` // for a signal (v1.1)
	Paused   bool   `json:"paused"`
}
