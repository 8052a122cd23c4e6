// Package job is Leasehold's job model and job store: what a client
// submits, how it is validated, how it is kept in Redis, and how it is read,
// listed and cancelled. It does not run jobs; package execution claims and
// runs them on the same Redis data.
//
// # Model
//
// A Job is what a client submitted (kind, input, options) plus where it is
// in its life. Its JSON form is the API's job object. An Execution is one
// attempt at running it; a job shows its latest. A job's State moves so:
//
//	submit ─► queued ──► running ──► succeeded | failed | cancelled
//	            ▲  │        │  │
//	            │  │        │  └───► waiting ──► cancelled
//	            │  │        │           │ (signal, timeout)
//	            ├──┼────────┼───────────┘
//	            │  │        ▼
//	            │  │     retrying ──► cancelled | expired
//	            │  │        │
//	            │  └────────┼───────► cancelled | expired
//	            └───────────┘
//
// queued → running is a claim; running → retrying is a failed attempt with
// attempts left, which waits out its backoff and is queued again; an
// execution handed back at a graceful worker shutdown puts its job straight
// back to queued. A queued or retrying job can be cancelled or can expire
// (its max_wait passed before it started). running → waiting is a handler
// that ended its execution to wait for a signal (execution.Wait): the job
// holds nothing, and goes back to queued when Signal sends that name (or
// the wait times out); a waiting job can be cancelled at once. A signal
// sent before the wait is kept in the job and taken by the wait, in the
// same step that would start it. succeeded, failed, cancelled and
// expired are terminal: a job in one changes again only when a client
// retries it (failed, cancelled or expired → queued) or deletes it.
//
// Cancel decides in one script: a queued, retrying or waiting job becomes cancelled
// at once (it leaves ready, scheduled and deadlines); a running one only
// gets cancel_requested, and its owner, or the reaper if the owner is gone,
// finishes it as cancelled. Cancelling twice changes nothing; cancelling a
// job that ended otherwise is ErrConflict.
//
// Retry moves a failed, cancelled or expired job back to queued with its
// original max_attempts more attempts; its attempt number goes on from its
// last one, never back; RetryAll does it for the ended jobs a
// filter selects, a bounded page a call with a cursor to go on, one call
// per tenant at a time, and moves nothing more when run again. Delete removes
// an ended job at once. Pause and resume a queue are a set the workers
// read; Finished reads the jobs ended per minute over the last hour.
//
// # Redis layout
//
// Package internal/store/keys builds every key; the names below leave out the
// prefix. A queue's keys share the hash tag {q:<queue>}, so a queue lives in
// one slot and every script on it is atomic on a Redis Cluster too.
//
//	{q:Q}:job:<id>        hash: the job record, one string per field; the
//	                      latest execution is flattened into exec_* fields
//	{q:Q}:ready           zset of the lanes with claimable jobs, score =
//	                      the lane's virtual start: lanes in turn (fair
//	                      queueing, internal/store/scripts/fair.lua); priority
//	                      orders only a lane's own jobs
//	{q:Q}:lane:<keys>     zset of one lane's claimable ids (a tenant's jobs
//	                      with one set of concurrency keys), score
//	                      (100-priority)*2^43 + when it joined (Redis ms),
//	                      ties by id: priority, then FIFO
//	{q:Q}:fair            hash: the virtual clock and each waiting lane's
//	                      count of jobs
//	{q:Q}:scheduled       zset of ids waiting for a time (delay, retry
//	                      backoff, a wait's timeout), score = unix ms when
//	                      they become ready
//	{q:Q}:deadlines       zset of ids with a max_wait, score = unix ms when
//	                      they expire unless started: created_at + delay +
//	                      max_wait (a delay does not eat into max_wait)
//	{q:Q}:stats           hash: number of each tenant's jobs not ended
//	                      per <state>/<tenant> (stats.lua; all
//	                      tenants' are the sums), the ring of jobs ended per
//	                      minute (finished.lua), and folded_to, the
//	                      retired score Q's jobs are folded up to
//	{q:Q}:usage:<date>    hash: per <counter>/<tenant>, the jobs created,
//	                      executions started and ended of the UTC day
//	                      (usage.Lifecycle, stats.lua), read by AddUsage
//	{q:Q}:events:<id>     stream of the job's events (state, progress,
//	                      output, log), capped at about scripts.EventsMaxLen,
//	                      made when something needs it (its first emitted
//	                      event, a reader that waits, 4 KB of state events);
//	                      before, its state events are in its hash's field
//	                      states (states.lua; Events merges them by id);
//	                      a minute after the job ends, the workers' reapers
//	                      fold them into the job's folded key and delete
//	                      the stream (fold in transition.lua; Events reads
//	                      either, a retry puts them back)
//	{q:Q}:folded:<id>     string: an ended job's events and long hash
//	                      fields, folded out a minute after its end; its
//	                      hash keeps the short ones and folded "1", a
//	                      listpack (Get, List and the scripts merge them);
//	                      then packed (scripts.Pack): the hash's fields
//	                      too, compressed, and no hash (Get, List and
//	                      Events decode it; a script that needs its
//	                      fields has it unpacked first, and packed again
//	                      a minute later); it expires a day after the end
//	                      of the job's retention
//	{q:Q}:fold_later      zset of ended ids the fold passed over while
//	                      their webhook delivery was pending, and of
//	                      packed ones unpacked since, score = unix ms when
//	                      the fold looks at them again
//	{q:Q}:retired         zset of Q's terminal ids, score = when the job
//	                      is deleted (finished_at + retention) ms
//	{q:Q}:tenant:<t>      zset of tenant t's ids in Q, score = created_at ms
//	{queues}:set          set of queue names
//	{queues}:paused       set of paused queue names (workers skip them)
//	{job:<id>}:queue      string: the job's queue, to find a job by id
//	{idem:<t>}:<key>      string: what tenant t's Idempotency-Key stands for
//
// The job hash's fields, who writes each, and the transition rule are
// written down once, at the top of internal/store/scripts/transition.lua. Every
// script that changes a job's state does it there (move), in the same
// step as its other writes: the compare-and-set on the state, the stats
// (-1 old state, +1 new, of the job's tenant, while not ended; one more
// ended in the minute), a state event, and, when the new state is
// terminal, a ZADD to {q:Q}:retired scored by the end of its retention
// (Config.Retention, DefaultRetention by default). So queue counts are exact
// and O(1). The workers' reapers (and every claim) delete the hash and
// event stream of retired jobs past their retention, a batch at a time:
// one ZADD per batch of finishes instead of two PEXPIREs per job, and no
// per-key TTL in Redis's expires table. The same step takes them out of
// their tenant's listing index (forget, in transition.lua).
//
// A job id says which queue holds the job: it carries 16 bits of a hash
// of the queue's name (internal/jobid). A read by id asks the queues with
// that tag, nearly always one, whether they hold it. Ids of version 7,
// made before, have an id → queue lookup key that lives Retention + 30
// days from submission; such a job still alive after that is found by
// asking each queue.
//
// # Submission and idempotency
//
// Submit validates everything before it writes anything: invalid input
// returns a *ValidationError listing every bad field, and Redis is
// untouched. Then it adds the queue's name to the set of queues (at most
// once a minute per Store and queue: the write is idempotent and invisible
// to clients), and then one script that creates
// the job record, enqueues it (ready, or scheduled when delayed), adds its
// deadline, index entries, stats and first event, all at once, and only if
// the job does not exist yet.
//
// With an Idempotency-Key, a fresh job id is first offered with SET NX on
// the key's record, which holds the job id, the queue and a hash of the
// normalized request (defaults applied, keys sorted, JSON canonical, so key
// order and white space do not matter). Whoever set it, and every later
// request with the same hash, then runs the create script with the id in
// the record. Because that script creates only a job that does not exist:
//
//   - concurrent requests with one key create exactly one job;
//   - a request that crashed after SET NX and before the script leaves a
//     record with no job, and the next retry creates the job;
//   - a request with a different body under the same key gets
//     ErrIdempotencyConflict and changes nothing.
//
// SubmitBatch submits up to MaxBatch jobs of one tenant, each as its own
// Submit would (Submit is a batch of one): the same checks, each item
// answered or refused on its own, a refused one writing nothing. Its
// round trips are per batch, not per job: the keys' rules, then the
// idempotency records and the cap's counts, then the queues' names, then
// the create script on each queue's items, 100 items a run, run after run
// (per run of consecutive items of one queue under a cap, so each is
// counted after the ones before it); each run's jobs are answered while
// Redis creates the next run's (SubmitBatchEach). A run that fails leaves
// its items unanswered (UnansweredError), not refused: it may have run,
// so their records stay, and a retry with the key finds or creates the
// job, once.
//
// Retention must be at least the idempotency TTL: a retry must never find
// the record but not the job, or it would create the job a second time.
//
// The scripts need Redis 7.0 or later (SET NX GET; Lua numbers passed to
// commands exactly).
//
// # Cost
//
// Submit is two round trips (one without an idempotency key, and one more
// for a queue the Store has not named in the last minute), each O(1)
// apart from O(log n) sorted-set inserts; SubmitBatch the same number per
// batch, plus one per queue it names. Get is one (the hash and its folded
// key) once the Store knows the queue of the id's tag, else two (which
// queue holds the job first); Cancel and Signal are one more (the job's
// lane, then their script). A List page examines at most 1000 index entries, whatever the
// filters, in at most about log2(1000/limit) + 1 rounds of two pipelined
// round trips: each round reads every queue's index and the hashes of the
// entries it examines. Queues are expected to be few (tens): List, Stats and
// the lookup miss of an id of version 7 ask every queue.
package job
