// Package cancel asks running work to stop and turns that request into a
// cancelled context whose cause is ErrRequested.
//
// # State first, event second
//
// A request is two writes in a fixed order:
//
//	Flags.Request ──1──▶ Redis   SET <flag> <now> PX ttl   (the truth)
//	              ──2──▶ NATS    publish id                (the accelerator)
//
// Watcher.Run reads the flags of every watched id from Redis every Poll, all
// in one pipelined round trip, and reads the flag of an id at once when a
// NATS message names it:
//
//	NATS message for id ──▶ read flag of id ─┐
//	                                         ├──▶ set: every context watching
//	poll ──▶ read flags of all watched ids ──┘     id: cancel(ErrRequested)
//
// A message alone cancels nothing: anyone who can publish on the subject
// could send one, and only the flag says a cancel was requested. Where the
// truth of the request is kept elsewhere (a job's record), the flag is a
// cache of it, and WatcherConfig.Requested is asked about the ids whose
// flag is found set: only those it confirms are cancelled, so a flag
// written late, after the work it was meant for was run again, stops
// nothing.
//
// The flag is written before the message is sent, so whenever a message
// could have been lost (the watcher was reconnecting, NATS was down, the
// subscriber was too slow and NATS dropped it) the flag is already there for
// the next poll to find. No path depends on one message arriving: the
// message only makes cancellation fast. That is why Request fails when
// Redis fails (nothing was promised, and nothing is published), and succeeds
// when only NATS fails (the promise is kept, later).
//
// # Guarantees
//
//   - A Request that returned nil is seen by every Watcher watching id while
//     the flag lives: by message, normally within a millisecond or two (one
//     Redis read after the message); by poll, within
//     Poll (default 2s), when NATS is down or the message was lost.
//   - After a NATS outage the Watcher reads every watched flag as soon as its
//     connection is back, since messages sent meanwhile are gone.
//   - An id watched after its request is caught right after Watch when the
//     request's message reached the Watcher before the Watch (it keeps such
//     ids for a few seconds), or when it had no live subscription to hear
//     one (no NATS, not subscribed yet, reconnecting): then Run reads the
//     flag of each new id at once. Otherwise, the message lost, at the next
//     poll at the latest. Watch itself never waits on Redis, and a watch of
//     an id nobody cancels reads nothing until the poll.
//   - With Redis down nothing is cancelled by poll, and Request fails: nothing
//     is promised that cannot be kept. Stopping work whose owner is cut off
//     from Redis is self-fencing's job, in the lease keeper.
//   - A Redis failover with asynchronous replication can lose a flag written
//     just before it, like any other write; then the request is lost,
//     message or not.
//
// # The flag's TTL is a cache lifetime
//
// The flag says "stop" to whoever still runs id. Its TTL only bounds how long
// Redis keeps that answer; it is not the truth about the job, which its own
// record keeps for good. Pick a ttl that covers every time id can still run
// (timeout × remaining attempts, plus backoff). Requesting again never
// shortens a flag: it lives at least as long as the longest request promised.
//
// The flag's value is the time of the first request, on Redis's clock:
// workers measure cancel latency from it. Flags written before it was
// recorded hold "1" and read as no time.
package cancel
