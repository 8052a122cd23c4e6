// Package store owns Leasehold's data in Redis: every key (package keys),
// every Lua script (package scripts), every command sent, and every reply
// decoded. The domain packages above it keep the rules and the flow and
// call its typed operations; none of them sends a command or sees a
// go-redis type. How an operation fuses its commands into round trips is
// the store's own matter.
//
// Errors: an operation that could not reach Redis, or that Redis could not
// serve now, returns an error wrapping ErrUnavailable (see Classify).
package store

import (
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/trace"

	"github.com/leasehold/leasehold/internal/store/keys"
)

// Store sends the commands of every operation to one Redis: a single
// server, a Sentinel-managed primary or a Cluster.
type Store struct {
	rdb  redis.UniversalClient
	keys keys.Space
	jobs jobs // the job operations' settings (job_store.go)
}

// Config is how a Store lays out and keeps its data.
type Config struct {
	// Prefix starts every key; "" is keys.DefaultPrefix. Processes that
	// share data share it.
	Prefix string
	// Retention is how long a job and its events stay readable after the job
	// ends: every transition to a terminal state retires the job until
	// then, and the workers' reapers delete its hash and event stream
	// after. Default job.DefaultRetention (7 days). It must be at least
	// IdempotencyTTL (see Validate), or a retried request could find its
	// job gone and create it again.
	Retention time.Duration
	// IdempotencyTTL is how long an Idempotency-Key is remembered.
	// Default job.DefaultIdempotencyTTL (24h).
	IdempotencyTTL time.Duration
	// TracerProvider makes the submit and cancel spans of each job's trace;
	// default otel.GetTracerProvider().
	TracerProvider trace.TracerProvider
	// OnlyLimitedKeys refuses a submission whose concurrency_keys name a
	// key with no limit or budget (exact or by its prefix's wildcard),
	// other than the tenant's own (tenant:<tenant> and keys under
	// tenant:<tenant>:): what the HTTP API sets, so that a tenant can
	// neither hold slots nobody limits nor fill Redis with keys nobody
	// configured. A program that submits its own jobs may leave it off.
	OnlyLimitedKeys bool
	// UsageRetention is how long the count of each day's jobs submitted is
	// kept after the day ends (its queue's usage; see AddUsage). Default
	// DefaultUsageRetention (400 days), as usage.Counters keeps the rest.
	UsageRetention time.Duration
}

// New returns the store of rdb's data.
func New(rdb redis.UniversalClient, cfg Config) *Store {
	ks := keys.New(cfg.Prefix)
	return &Store{rdb: rdb, keys: ks, jobs: newJobs(rdb, ks, cfg)}
}
