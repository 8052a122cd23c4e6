package keys

import (
	"strings"
	"time"
)

// Job keys. Everything of one queue shares the hash tag {q:<queue>}, so a
// queue is one slot and every script on it is atomic on a cluster. Queue
// names and job ids are validated by package job before they get here: no
// braces, no colons, so no name can step into another's key.

// Queues is the set of every queue name that has received a job.
func (s Space) Queues() string { return s.key("queues", "set") }

// PausedQueues is the set of the names of paused queues: workers read it
// every heartbeat interval and claim nothing from those. It shares the
// queues set's slot, so a pause names the queue and pauses it at once.
func (s Space) PausedQueues() string { return s.key("queues", "paused") }

// JobQueue maps a job id of version 7 to the name of its queue, so the job
// can be found by id alone; it lives in its own slot, outside every queue.
// Ids made since carry their queue's tag instead (internal/jobid), and this
// key is read until the last job of an older version is gone.
func (s Space) JobQueue(id string) string { return s.key("job:"+id, "queue") }

// Idempotency is a tenant's idempotency record for one Idempotency-Key.
func (s Space) Idempotency(tenant, key string) string { return s.key("idem:"+tenant, key) }

// Job is the hash that holds one job's record.
func (s Space) Job(queue, id string) string { return s.key("q:"+queue, "job:"+id) }

// JobOf returns the queue and id of the job whose hash is key (Job), and
// whether key is one: for a script's reply that names a job by its key.
func (s Space) JobOf(key string) (queue, id string, ok bool) {
	rest, ok := strings.CutPrefix(key, s.prefix+"{q:")
	if !ok {
		return "", "", false
	}
	return strings.Cut(rest, "}:job:") // no queue name holds a brace
}

// JobDeleted marks a deleted job for as long as an Idempotency-Key may
// still stand for it, so a replay does not create it again.
func (s Space) JobDeleted(queue, id string) string { return s.key("q:"+queue, "deleted:"+id) }

// JobEvents is the capped stream of one job's events.
func (s Space) JobEvents(queue, id string) string { return s.key("q:"+queue, "events:"+id) }

// JobFolded is the string that holds an ended job's events and long
// fields once a reaper folded them out of its stream and hash
// (internal/store/scripts/transition.lua's fold): in the job's slot, so the
// scripts that read or delete the job reach it in the same step.
func (s Space) JobFolded(queue, id string) string { return s.key("q:"+queue, "folded:"+id) }

// QueueReady is the sorted set of a queue's jobs ready to be claimed.
func (s Space) QueueReady(queue string) string { return s.key("q:"+queue, "ready") }

// QueueScheduled is the sorted set of a queue's jobs waiting for a time
// (delay, retry backoff), scored by when they become ready.
func (s Space) QueueScheduled(queue string) string { return s.key("q:"+queue, "scheduled") }

// QueueDeadlines is the sorted set of a queue's jobs with a max_wait, scored
// by when they expire if they have not started.
func (s Space) QueueDeadlines(queue string) string { return s.key("q:"+queue, "deadlines") }

// QueueLane is the sorted set of one lane's waiting jobs: a tenant's jobs
// of one kind with one set of concurrency keys, lane being the kind, then
// the job's concurrency_keys as stored (a JSON array; scripts.Lane). See
// internal/store/scripts/fair.lua.
func (s Space) QueueLane(queue, lane string) string { return s.key("q:"+queue, "lane:"+lane) }

// QueueFair is the hash of a queue's fair-queueing state: its virtual clock
// and each waiting lane's count of jobs (see internal/store/scripts/fair.lua).
func (s Space) QueueFair(queue string) string { return s.key("q:"+queue, "fair") }

// QueueRetired is the sorted set of a queue's terminal jobs, scored by when
// their record (hash and events) is deleted: the end of their retention.
func (s Space) QueueRetired(queue string) string { return s.key("q:"+queue, "retired") }

// QueueFoldLater is the sorted set of a queue's ended jobs that its fold
// passed over while their webhook delivery was pending, to fold once it is
// not (member job id, score when to look again, in Redis-clock
// milliseconds; internal/store/scripts/job_fold.lua).
func (s Space) QueueFoldLater(queue string) string { return s.key("q:"+queue, "fold_later") }

// QueueStats is the hash counting a queue's jobs per state.
func (s Space) QueueStats(queue string) string { return s.key("q:"+queue, "stats") }

// QueueUsage is the hash of what a queue's scripts count of its tenants'
// usage on the UTC day of day (field "<counter>/<tenant>", value: count;
// internal/store/scripts/stats.lua): in the queue's slot, so that the move that
// creates, starts or ends a job counts it in the same step.
func (s Space) QueueUsage(queue string, day time.Time) string {
	return s.key("q:"+queue, "usage:"+day.UTC().Format(time.DateOnly))
}

// QueueTenantJobs indexes one tenant's jobs in a queue by creation time.
func (s Space) QueueTenantJobs(queue, tenant string) string {
	return s.key("q:"+queue, "tenant:"+tenant)
}

// QueueRetained is the hash of the bytes one tenant's jobs in a queue
// are charged, from their submit until their deletion: each job's (field:
// its id) and their sum (field "*"; internal/store/scripts/stats.lua).
func (s Space) QueueRetained(queue, tenant string) string {
	return s.key("q:"+queue, "retained:"+tenant)
}

// QueueWebhooks is a queue's webhook outbox: the sorted set of the
// deliveries of its jobs' ends still to be tried (member
// "<tenant>/<job id>", score when the next try is due, in Redis-clock
// milliseconds). It shares the queue's slot, so the move that ends a job
// adds its delivery in the same script (internal/store/scripts/transition.lua).
func (s Space) QueueWebhooks(queue string) string { return s.key("q:"+queue, "webhooks") }

// WebhookNames holds the key of the opaque worker names in the job objects
// webhooks deliver (webhook.Drainer), made by the first drainer to run.
func (s Space) WebhookNames() string { return s.key("webhooks", "names") }

// RetryLock is held while a bulk retry of tenant's jobs runs: one at a
// time per tenant, fleet-wide (store.Store.RetryAll).
func (s Space) RetryLock(tenant string) string { return s.key("retry:"+tenant, "lock") }
