// Package leasehold is the one entry point for a Go program that runs
// Leasehold jobs itself: it registers its own job kinds as Go functions,
// runs a worker with the same defaults, metrics and traces as the worker
// command, and submits, reads and cancels jobs, the way the HTTP API does.
//
//	c, err := leasehold.NewClient(rdb, leasehold.Config{Worker: execution.Config{NATS: nc}})
//	c.Handle("summarize", summarize) // an execution.Handler
//	go c.Run(ctx)                    // claims and runs jobs until ctx ends
//	j, err := c.Submit(ctx, "acme", job.Submission{Kind: "summarize", Input: in})
//
// A Client serves the built-in kinds (echo, sleep, llm.chat) and the
// remote handlers of Config.Handlers beside the ones given to Handle. A
// job submitted with a webhook (job.Submission.Webhook, which Submit does
// not check against an allow-list: the program is trusted) is delivered by
// the webhook.Drainer that every worker and API process runs; a program
// that is the only process of its deployment runs one itself. Any
// number of processes may run Clients and the worker command on the same
// Redis: they share queues, concurrency limits and cancels.
package leasehold

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/cancel"
	"github.com/leasehold/leasehold/execution"
	"github.com/leasehold/leasehold/internal/store"
	"github.com/leasehold/leasehold/job"
	"github.com/leasehold/leasehold/kinds"
	"github.com/leasehold/leasehold/kinds/remote"
	"github.com/leasehold/leasehold/ratelimit/usage"
	"github.com/leasehold/leasehold/schedule"
)

// Config configures a Client. Zero values mean the documented defaults,
// which are the worker command's.
type Config struct {
	// Worker configures the Client's worker. Its Prefix (every process of
	// one deployment must agree on it), NATS (wake-ups and fast cancels;
	// nil means polling alone), Logger and TracerProvider serve the whole
	// Client. Usage defaults to counters on the same Redis, so that the
	// tenants' usage counts these executions, as the worker command's do.
	Worker execution.Config
	// Handlers are remote kinds: kind → handler URL (see package
	// kinds/remote, and remote.ParseHandlers for LEASEHOLD_HANDLERS).
	// Default none.
	Handlers map[string]string
	// LLM configures the built-in llm.chat kind; its zero value makes every
	// llm.chat job fail, saying no upstream is set.
	LLM kinds.LLMConfig
	// Sleep configures the built-in "sleep" kind: the URL prefixes its
	// notify_url may start with (none by default).
	Sleep kinds.SleepConfig
}

// Client submits, reads and cancels jobs, and runs a worker for the kinds
// it was given. It is safe for concurrent use; call Handle before Run.
type Client struct {
	waker  *execution.Waker
	store  *store.Store
	flags  *cancel.Flags
	worker *execution.Worker
	sched  *schedule.Store
}

// NewClient returns a Client on rdb, a Redis or a Redis Cluster client
// (with its maxmemory-policy set to noeviction).
func NewClient(rdb redis.UniversalClient, cfg Config) (*Client, error) {
	if rdb == nil {
		return nil, errors.New("leasehold: nil redis client")
	}
	wcfg := cfg.Worker
	if wcfg.Usage == nil {
		counters, err := usage.New(store.New(rdb, store.Config{Prefix: wcfg.Prefix}), usage.Config{})
		if err != nil {
			return nil, fmt.Errorf("leasehold: %w", err)
		}
		wcfg.Usage = counters
	}
	// An idempotency key outlives no job: a worker kept short (tests, a
	// scratch fleet) remembers its Client's keys as long as its jobs.
	retention := cmp.Or(wcfg.Retention, job.DefaultRetention)
	scfg := store.Config{Prefix: wcfg.Prefix, Retention: retention,
		IdempotencyTTL: min(retention, job.DefaultIdempotencyTTL), TracerProvider: wcfg.TracerProvider,
		UsageRetention: wcfg.Usage.Retention()}
	if err := scfg.Validate(); err != nil {
		return nil, fmt.Errorf("leasehold: %w", err)
	}
	data := store.New(rdb, scfg)
	flags, err := cancel.New(data, wcfg.NATS, cancel.Config{Logger: wcfg.Logger})
	if err != nil {
		return nil, fmt.Errorf("leasehold: %w", err)
	}
	w, err := execution.NewWorker(rdb, wcfg)
	if err != nil {
		return nil, fmt.Errorf("leasehold: %w", err)
	}
	if cfg.LLM.Usage == nil {
		cfg.LLM.Usage = wcfg.Usage
	}
	if cfg.Sleep.Logger == nil {
		cfg.Sleep.Logger = wcfg.Logger
	}
	kinds.Register(w, cfg.Sleep, cfg.LLM)
	remote.Register(w, cfg.Handlers, remote.Config{MaxConns: max(wcfg.Concurrency, remote.DefaultMaxConns), Logger: wcfg.Logger})
	waker := execution.NewWaker(wcfg.NATS, wcfg.Prefix, wcfg.Logger)
	sched, err := schedule.NewStore(data, schedule.Config{Jobs: data, Waker: waker})
	if err != nil {
		return nil, fmt.Errorf("leasehold: %w", err)
	}
	return &Client{waker: waker, store: data, flags: flags, worker: w, sched: sched}, nil
}

// Handle makes the worker run h for jobs of kind, in place of any built-in
// or remote handler of that kind. Call it before Run.
func (c *Client) Handle(kind string, h execution.Handler) { c.worker.Handle(kind, h) }

// WorkerID names the worker in the executions it runs.
func (c *Client) WorkerID() string { return c.worker.ID() }

// Run claims and runs jobs until ctx is done, then stops claiming, lets
// running executions finish for ShutdownGrace, hands back the rest, and
// returns when every execution has ended.
func (c *Client) Run(ctx context.Context) error { return c.worker.Run(ctx) }

// Running is how many executions the worker is running now.
func (c *Client) Running() int { return c.worker.Running() }

// HandBack ends Run's shutdown grace at once: running executions are
// cancelled and their jobs handed back to their queues.
func (c *Client) HandBack() { c.worker.HandBack() }

// Submit submits a job for tenant, as POST /v1/jobs does, without an
// Idempotency-Key, and wakes an idle worker of its queue.
func (c *Client) Submit(ctx context.Context, tenant string, s job.Submission) (job.Job, error) {
	j, _, err := c.store.Submit(ctx, tenant, s, "")
	if err != nil {
		return j, err
	}
	c.waker.Wake(ctx, j.Queue)
	return j, nil
}

// SubmitBatch submits 1 to job.MaxBatch jobs for tenant at once, as POST
// /v1/jobs/batch does: each item is created, replayed (its idempotency key
// was used before with the same submission) or refused on its own, in
// job.BatchResult.Err, and a refused item writes nothing; it takes a few
// round trips to Redis, one per queue, not several per job. It wakes an
// idle worker of each queue that got a job. An error means the batch
// stopped midway (see store.Store.SubmitBatch).
func (c *Client) SubmitBatch(ctx context.Context, tenant string, items []job.BatchItem) ([]job.BatchResult, error) {
	res, err := c.store.SubmitBatch(ctx, tenant, items, job.Cap{})
	if err != nil {
		return res, err
	}
	woken := map[string]bool{}
	for _, r := range res {
		if r.Created && !woken[r.Job.Queue] {
			woken[r.Job.Queue] = true
			c.waker.Wake(ctx, r.Job.Queue)
		}
	}
	return res, nil
}

// Get returns tenant's job id; job.ErrNotFound if there is none.
func (c *Client) Get(ctx context.Context, tenant, id string) (job.Job, error) {
	return c.store.Get(ctx, tenant, id, false)
}

// Cancel cancels tenant's job id, as POST /v1/jobs/{id}/cancel does (see
// execution.CancelJob): job.ErrConflict, with the job, when it already
// ended otherwise than cancelled.
func (c *Client) Cancel(ctx context.Context, tenant, id string) (job.Job, error) {
	return execution.CancelJob(ctx, c.store, c.flags, tenant, id, false)
}

// Signal sends tenant's job id the signal name with data (JSON, at most
// job.MaxSignalData bytes, nil for null), as POST /v1/jobs/{id}/signal
// does: a job waiting for that name is queued at once (and an idle worker
// woken), any other job not ended keeps the signal for its next wait of
// that name. job.ErrConflict, with the job, when it already ended;
// job.ErrSignalsFull when it keeps as many signals as it may.
func (c *Client) Signal(ctx context.Context, tenant, id, name string, data json.RawMessage) (job.Job, error) {
	j, resumed, err := c.store.Signal(ctx, tenant, id, false, name, data)
	if err == nil && resumed {
		c.waker.Wake(ctx, j.Queue)
	}
	return j, err
}

// CreateSchedule creates tenant's schedule, as POST /v1/schedules does:
// created is false when one of that name exists with the same spec, and
// the error schedule.ErrExists when it has another. The schedules fire
// wherever a schedule.Scheduler runs (every API and worker process).
func (c *Client) CreateSchedule(ctx context.Context, tenant string, spec schedule.Spec) (s schedule.Schedule, created bool, err error) {
	return c.sched.Create(ctx, tenant, spec)
}

// Schedules returns a page of tenant's schedules by name, as GET
// /v1/schedules does: up to limit (0: 50) after cursor ("" = from the
// first), and the cursor of the next page ("" after the last).
func (c *Client) Schedules(ctx context.Context, tenant string, limit int, cursor string) ([]schedule.Schedule, string, error) {
	return c.sched.List(ctx, tenant, limit, cursor)
}

// Schedule returns tenant's schedule name; schedule.ErrNotFound if none.
func (c *Client) Schedule(ctx context.Context, tenant, name string) (schedule.Schedule, error) {
	return c.sched.Get(ctx, tenant, name)
}

// DeleteSchedule deletes tenant's schedule name; the jobs it fired stay.
func (c *Client) DeleteSchedule(ctx context.Context, tenant, name string) error {
	return c.sched.Delete(ctx, tenant, name)
}

// PauseSchedule stops tenant's schedule name from firing until resumed.
func (c *Client) PauseSchedule(ctx context.Context, tenant, name string) (schedule.Schedule, error) {
	return c.sched.Pause(ctx, tenant, name)
}

// ResumeSchedule makes a paused schedule fire again from its next due time.
func (c *Client) ResumeSchedule(ctx context.Context, tenant, name string) (schedule.Schedule, error) {
	return c.sched.Resume(ctx, tenant, name)
}

// TriggerSchedule fires tenant's schedule name once now and returns the job.
func (c *Client) TriggerSchedule(ctx context.Context, tenant, name string) (job.Job, error) {
	return c.sched.Trigger(ctx, tenant, name, job.Cap{})
}
