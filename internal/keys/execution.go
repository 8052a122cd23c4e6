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

// QueueKeyLeases is the sorted set of leases a queue's running executions
// hold on one concurrency key (member job id, score expiry). It shares the
// queue's slot, so a claim takes every key's lease with the job atomically;
// a key's limit is therefore exact within a queue.
func (s Space) QueueKeyLeases(queue, key string) string { return s.key("q:"+queue, "ckey:"+key) }

// Limits is the hash of concurrency limits: field key (or "prefix:*"),
// value the limit. Workers read it every few seconds.
func (s Space) Limits() string { return s.key("limits", "limits") }
