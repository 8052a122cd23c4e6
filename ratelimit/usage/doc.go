// Package usage keeps per-tenant usage counters (tokens used, and any
// counter a caller names) per UTC day, counting each event exactly once
// however often its write is retried. The counters of a job's life
// (Lifecycle: jobs submitted, executions started and ended) are counted
// by Leasehold's queues themselves, in the step of each event, and read
// with store.Store.AddUsage; this package names them and their days (DropAt).
//
// Counters.Add takes an event id along with the amount (AddEach many
// events, in one script). One script checks the event's mark, adds the
// amount to the tenant's hash for the event's UTC day and sets the mark: a
// retry (the reply was lost, a job ran twice, a queue redelivered) finds
// the mark and adds nothing. No interleaving of concurrent duplicates can
// count one twice, since the check and the write cannot be split.
//
//	<prefix>{usage:<tenant>}:seen:2026-03-01   hash mark → n: the marks of the day's events, kept MarkTTL after the last
//	<prefix>{usage:<tenant>}:day:2026-03-01    hash counter → count, dropped Retention after the day
//
// A mark is a field of its day's hash, not a key of its own, and the
// field is a 12-byte digest of "<counter>:<event id>" (SHA-256, cut: two
// events of a tenant-day share one with a chance of about 4·10^-15 at 10^7
// events that day), not that string: a job's handful of events
// (submitted, started, ended, tokens) cost about 56 bytes each and no
// key. Marks that versions before wrote as "<counter>:<event id>" are
// looked up too, so an upgrade counts none of their events twice. A retry is found by a mark of its event's day or
// of the days either side, so a caller whose retry takes the time of the
// retry rather than of the event, or another process's clock, still
// counts once across a midnight.
//
// # What is exact and what is not
//
// Exact: a day's count is the sum of n over the distinct (counter, event id)
// pairs applied to it, as long as every retry of an event arrives within
// MarkTTL (default 8 days) of its first successful Add.
//
// Approximate, by what is stated here and nothing more:
//
//   - A retry that arrives more than MarkTTL after the first Add finds no mark
//     and is counted again, and so does one whose time is more than a day
//     away from the first Add's. Pick MarkTTL longer than the longest time anything
//     may retry (client backoff, queue redelivery, a job's attempts).
//   - A Redis failover with asynchronous replication can lose the last writes.
//     Mark and increment are one script and replicate together, so both are
//     lost or neither: a count the caller saw acknowledged may vanish, but no
//     event is counted twice because of it.
//   - Redis evicting keys would drop marks and counts: Leasehold requires
//     maxmemory-policy noeviction.
//
// A mark costs a hash field per (counter, event id) for MarkTTL: at 100
// events a second, about 70 million fields over 8 days, 4 GB. Size
// MarkTTL to the retry window, not longer.
//
// Days are UTC: an event at 23:30 in New York on March 1 counts on March 2.
// All of a tenant's keys share one hash tag, so one tenant is one Redis
// Cluster slot and Get reads a range of days in one round trip.
package usage
