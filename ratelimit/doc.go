// Package ratelimit limits how often a subject (a tenant, an API key) may do
// something. Counts live in Redis, so every API replica enforces one shared
// limit, and each decision is one atomic Lua script: check and count cannot
// be split by a concurrent request, a second process or a crash.
//
// Every limiter answers with a Decision, never a bare bool: whether the
// request may go ahead, how much quota is left, when it is back, when to
// retry, and the policy, which Headers turns into the RateLimit,
// RateLimit-Policy and Retry-After fields of an HTTP answer. A refusal is a
// Decision with Allowed false (HTTP 429). An error means no decision was
// made, Redis did not answer: an API fails closed with 503, never with a
// fake 429.
//
// # Algorithms
//
// All four take a Rate (Limit per Period; ParseRate reads the LEASEHOLD_RATE
// form "50/s:100") and a cost n ≥ 1 per request. A refused request changes
// nothing and costs nothing. Time is the Redis server's (TIME, read inside
// the script; µs), never a client's clock. On a Redis Cluster each node has
// its own clock, and every key of one subject lives on one node.
//
// TokenBucket (the one LEASEHOLD_RATE uses). A bucket holds up to Burst
// tokens and refills Limit per Period, continuously, computed from the time
// elapsed since the last request; no timer runs. A request takes n tokens if
// the bucket holds n. Guarantee: over any span of length T, at most
// Burst + Limit·T/Period are admitted; exact, since tokens are kept as
// integer ticks (1 token = Period in µs ticks). An n above Burst could never
// pass and is refused with ErrInvalid. Memory: one hash of two fields per
// subject (about 100 bytes), which expires when the bucket is full again.
//
// SlidingLog. One sorted-set entry per admitted request, scored with its
// time; a request of cost n fits if at most Limit − n entries lie in the
// window (now − Period, now]. Guarantee: at most Limit in any window of
// length Period, exactly. Each entry's member is a random 64-bit id drawn by
// the caller plus an index, never the bare timestamp, so requests in the
// same microsecond are all counted. Memory grows with the limit: up to Limit
// entries per subject, about 30 bytes each while a log has at most
// zset-max-listpack-entries (Redis keeps it as a listpack; 128 by default,
// 32 as docs/operations.md advises), about 120 bytes each beyond (a
// skiplist): a busy subject under 1000 per minute holds about 120 KB.
// Refused requests are not logged, so hammering costs no memory. The log
// expires one Period after its newest entry.
//
// SlidingWindow (a sliding window counter). Counts per fixed window
// [k·Period, (k+1)·Period); at a fraction f into window k a request is
// judged by prev·(1−f) + cur, where cur counts window k and prev window k−1:
// the previous window's requests are taken as evenly spread. Fixed memory:
// one hash of three fields per subject (about 80 bytes). Error bound: cur ≤
// Limit in every fixed window, and the true count in the sliding window
// (t − Period, t] is at most Limit + f·prev, so below 2·Limit, reached only
// when the previous window's requests were bunched at its end. In the other
// direction it may refuse a request of cost n while the sliding window holds
// only Limit − n − (1−f)·prev, when they were bunched at its start. It is
// exact when they were evenly spread, which steady traffic comes close to.
//
// FixedWindow. A counter per window [k·Period, (k+1)·Period), aligned on the
// Redis clock, created by the window's first request with INCRBY and given
// the window's remaining time to live in the same script. Guarantee: at
// most Limit per window. By its nature it lets up to 2·Limit through in a
// short span across a boundary (Limit at the end of one window, Limit more
// at the start of the next): take it where that is acceptable, for its one
// small key (about 50 bytes). Redis expires keys in whole milliseconds and
// keeps a key through its expiry millisecond, so a counter may outlive its
// window by up to 2 ms and count requests made that early in the next window
// as its own; Decision.Reset includes those 2 ms. A counter found without
// expiry (left by a crash between INCR and PEXPIRE in an older, non-atomic
// writer, an operator or a restore) gets it back at its next request, so no
// subject is limited forever.
//
// # Keys
//
// Every key of a subject shares the hash tag {rl:<subject>}, and window keys
// carry the window length, so a changed window starts afresh; token buckets
// of different rates on one subject share their tokens. A subject is one
// Redis Cluster slot: a hot subject is not spread, and one limit across many
// subjects is not offered. Subjects must not contain braces.
//
// # Shadow mode and fallback
//
// Shadow wraps a limiter so that it decides, counts and logs what it would
// have refused, and allows it (Decision.Shadowed): a limit can be tried on
// real traffic first. Fallback wraps a limiter so that, while Redis does not
// answer, a small per-process token bucket (golang.org/x/time/rate) decides
// instead (Decision.Fallback), with the switch logged both ways and every
// such decision counted. N processes then admit up to N times the fallback
// rate together: it is an emergency limit, not the shared one. Without
// Fallback a Redis error is returned as an error.
//
// Exactly-once usage counters (per tenant, per UTC day) are in the usage
// subpackage.
package ratelimit
