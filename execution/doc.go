// Package execution runs jobs: it claims them from their queues, owns each
// attempt through a lease and a fencing token, keeps the lease alive with
// heartbeats, and records how each attempt ended — only while it is still
// the owner.
//
// # Guarantees
//
//   - A claim hands a job to one worker: the claim script removes it from
//     the ready set, issues a new fencing token and takes the lease in one
//     atomic step.
//   - Only the owner writes. Heartbeats, events (Execution.Emit) and the
//     finish all check the execution's token against the job's current one
//     in the same script as the write; a stale execution's writes are
//     refused with ErrNotOwner and change nothing.
//   - A handler stops before anyone else can own its job: its context is
//     cancelled with lease.ErrLost when a heartbeat finds the lease gone, or
//     when no heartbeat has succeeded for a whole lease TTL (the trust
//     window counts from when the claim or heartbeat was sent).
//   - An accepted job reaches a terminal state. When a worker dies, its
//     leases expire and the next claim or reap finalises each execution as
//     lost: the job is retried with a higher token, or cancelled if a cancel
//     was requested.
//   - A requested cancel is honoured: the handler sees cancel.ErrRequested
//     through NATS in milliseconds, or at the next heartbeat, which reads
//     the job record; a failure or hand-off of a job with a cancel requested
//     ends it cancelled, never retried.
//   - A wait holds nothing: a handler that returns Wait ends its execution,
//     and the finish that records it releases its lease and slots and
//     moves the job to waiting, spending no attempt. Checkpoint saves a
//     value only under the execution's token, identity and live lease;
//     every later execution reads it, and the signal that resumed the
//     job, with Resume.
//   - Graceful shutdown hands work back: running executions get a grace
//     period, then are cancelled with ErrShutdown and returned to the ready
//     set at once, without spending the attempt.
//
// # Cost
//
// A claim of up to Concurrency jobs is two round trips while the lanes at
// the head of the ready set stay the same, up to four when they change (a
// read-only peek for those lanes and the due work, pipelined with a read
// of the first jobs of the lanes the last claim saw there and with slots
// of their concurrency keys; a read of what that missed, and the slots
// the first did not take, if anything; then the claim script over those
// candidates), O(k log n) for k candidates in a
// queue of n, never a scan. On one primary, a claim whose jobs' keys have
// neither a limit nor a budget (a tenant's key, usually) takes their slots
// in the claim script's round trip, before it, and reads the next claim's
// peek after it: a claim that follows another within 10 ms is then one
// round trip;
// the due work one claim does is bounded, and so is the number of lanes it
// looks at while keys are full (4× the batch + 16, at most 256). A heartbeat is one round trip per queue for all
// of a worker's executions there. Finishes are written in batches, one
// script per queue for those that arrived while the last batch was being
// written: one round trip for the batch. A handler that returns gives its
// slot of Concurrency back at once (unless it holds a slot of a limited
// key, which its finish releases): the next claim goes out beside the
// finish, not after it. With LEASEHOLD_REDIS_MIN_REPLICAS on one primary,
// a claim's WAIT is sent once the claim returns and its jobs start when it
// does, while the next claim goes out; one WAIT confirms every claim made
// while the last was out.
//
// # Fairness
//
// A queue serves lanes in turn, by start-time fair queueing (see
// internal/store/scripts/fair.lua and docs/architecture.md, Fairness): a lane is
// one tenant's jobs with one set of concurrency keys; the ready set holds
// the lanes, scored by their virtual start, and each lane its jobs,
// priority first, then FIFO. Priority orders only a lane's own jobs: it
// never puts one lane ahead of another's turn. A tenant's lanes share one
// turn. With L tenants waiting and their keys free, a tenant's k-th job is
// claimed within k·L claims of its
// submission, rounded up to a whole batch, plus at most one batch per
// worker already under way (two for a worker whose claims are fused: its
// next claim's peek is read with the claim before); a tenant with 10,000 queued jobs delays
// another's 10 by a few batches, not 10,000 jobs. A lane waiting for a
// full key holds one place in the ready set however deep its backlog, and
// gives its turn up when a claim finds it waiting: however many lanes one
// tenant keeps waiting, they never hide another tenant's lanes from the
// claim's bounded look past the head.
//
// # Handlers
//
//	w.Handle("summarise", func(ctx context.Context, e *execution.Execution) (any, error) {
//		// e.Input is the job's input; e.Token() goes to downstream writes.
//		return map[string]string{"summary": "…"}, nil
//	})
//
// A handler returns a result (stored as JSON) or an error. Errors are
// retried with backoff up to the job's max_attempts unless wrapped with
// Permanent. A panic fails the attempt.
//
// A worker claims only jobs of the kinds it has handlers for: the peek
// passes over the lanes of other kinds (a lane's name starts with its
// kind), so workers of different kinds share a queue and no attempt is
// spent on a kind a worker lacks. Each worker publishes itself, with its heartbeat, in the
// registry of live workers (registry.go, LiveWorkers).
//
// An upstream's refusal for capacity is pushback: Pushback(err, wait) goes
// back to the queue without spending an attempt, and cuts and throttles
// every adaptive key of the job; PushbackOn(keys, err, wait) cuts only
// those of keys the job names, the keys of the upstream that refused
// (llm.chat passes its model's key), so a job that names a second model's
// key does not throttle that model for every tenant:
//
//	if resp.StatusCode == http.StatusTooManyRequests {
//		return nil, execution.PushbackOn([]string{"model:" + model}, err, retryAfter)
//	}
//
// ReportTokens replaces the job's token estimate with what the call spent
// in its keys' tpm budgets.
package execution
