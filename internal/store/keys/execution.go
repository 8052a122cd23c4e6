package keys

import "strings"

// QueueLeases is the sorted set of a queue's execution leases: member job
// id, score the lease's expiry in Redis-clock milliseconds.
func (s Space) QueueLeases(queue string) string { return s.key("q:"+queue, "leases") }

// QueueFence is the counter that issues a queue's fencing tokens. Tokens are
// unique across the queue, so a job's tokens grow from one execution to the
// next.
func (s Space) QueueFence(queue string) string { return s.key("q:"+queue, "fence") }

// WakeSubject is the NATS subject that wakes one idle worker of a queue.
// It is derived from the prefix, so systems (and tests) sharing a NATS
// server under different prefixes never wake each other's workers.
func (s Space) WakeSubject(queue string) string {
	return strings.ReplaceAll(strings.TrimSuffix(s.prefix, ":"), ":", ".") + ".wake." + queue
}

// Limits is the hash of concurrency limits: field key (or "prefix:*"),
// value the limit. Workers read it every few seconds.
func (s Space) Limits() string { return s.key("limits", "limits") }

// Budgets is the hash of keys' budgets: field key (or "prefix:*"), value
// its options as job.Budget writes them ("rpm=3000;tpm=400000;adaptive").
// It shares the limits' slot, so both change in one transaction; a worker
// of a version before budgets reads the limits alone and still enforces them.
func (s Space) Budgets() string { return s.key("limits", "budgets") }
