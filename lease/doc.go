// Package lease provides named, timed, renewed occupancy in Redis: the
// fix for the Redis counter that leaks on crash, double-counts a retried
// INCR and oversells on a double DECR.
//
// A lease key (say "model:gpt-4o") is a sorted set. Each member is a
// holder id; its score is the lease's expiry, in milliseconds of the Redis
// clock. Because every occupancy is named and timed:
//
//   - Acquire is one script: reap expired members, check the count against
//     the limit, add. Retrying it with the same holder moves that holder's
//     expiry; it never takes a second slot.
//   - Release is ZREM of the holder's own member: idempotent, and a late
//     release can never free a slot someone else holds.
//   - A crashed holder's lease is reaped by the next Acquire after it
//     expires. No background timer is needed for correctness: the busier
//     the key, the more often it is cleaned.
//   - Renew moves the expiry only while the member is there and unexpired;
//     it never resurrects a lease that is gone.
//
// Scores hold the expiry rather than the last heartbeat, so leases with
// different TTLs share a key safely: reaping needs no TTL of its own, and
// a short-TTL caller can never reap a long-TTL lease early. All time is
// Redis TIME, read inside the scripts; a client's clock is never trusted
// for expiry.
//
// Every acquisition gets a fencing token from a per-key counter, issued in
// the same script, so tokens strictly increase in the order Redis granted
// the leases. The counter is floored by the Redis clock in µs, so it may
// expire a second after its last token (no key a tenant's jobs name
// outlives its use) and the next token is still larger.
//
// # The trust window
//
// A holder may act on its lease until Lease.TrustedUntil: the time, on its
// own clock, when it sent the last successful acquire or renew, plus the
// TTL. Redis computed the expiry from the moment the request arrived, which
// is later, so the holder's trust ends no later than the lease does in
// Redis, and nobody else can be granted the slot before then (up to the
// drift between the two clocks over one TTL, negligible against TTLs of
// seconds). A Keeper renews every TTL/3 and, when no renew has succeeded
// by TrustedUntil, cancels the holder's context with ErrLost: the holder
// fences itself even while Redis is unreachable. A holder that was paused
// (GC, SIGSTOP) past its trust window wakes up with its context already
// cancelled or its next renew refused; fencing tokens make any write it
// still attempts harmless.
//
//	        Acquire                 Renew (member live)
//	(none) ─────────▶ held ◀──────────────────────┐
//	                   │ └────────────────────────┘
//	 Release / expiry  │
//	 (reaped by the    ▼
//	 next Acquire)   gone ── Renew ──▶ ErrLost
//
// # Waiting in line
//
// Semaphore.Wait takes a ticket in the key's line and waits for a slot,
// first come first served across processes; it returns a *Permit, whose
// lease a Keeper renews until Release. The head of the line is granted
// when the set has room; a later ticket never passes an earlier live one.
// Waiters heartbeat their tickets as they poll, so a dead waiter's ticket
// expires and stops holding up the line. Each transition is a
// compare-and-set in a script:
//
//	         poll: heads the line, room      ┌─────────┐
//	PENDING ────────────────────────────────▶│ GRANTED │
//	   │  │                                  └─────────┘
//	   │  └─ ctx done ─▶ CANCELLED
//	   └──── MaxWait ──▶ TIMED_OUT      (no heartbeat for a ticket TTL: expired)
//
// Every exit path without a permit leaves the line, and releases the slot
// if a grant raced the exit. Releases wake the line over NATS when a
// connection is given; polling (at least every MinPoll) covers lost wakes.
//
// Keys hash to one Redis Cluster slot per lease key (the set and its
// counter share a hash tag), so a Client works the same on a Cluster.
package lease
