// Package fencing refuses writes from owners that have lost their lease.
//
// # Why stale tokens are refused
//
// A lease is only trusted for its TTL, and its holder cannot always tell when
// that has passed. A worker stopped by a long GC pause, a SIGSTOP or a
// network partition keeps believing it owns its execution. Meanwhile its
// lease expires, another worker takes the execution over, and is issued a
// higher token. When the first worker wakes up it carries on where it
// stopped and writes with its old token. Had the store accepted that write,
// two owners would be writing one resource. Here the store has already seen
// the newer token, so it refuses the old one with ErrStale, and the old worker
// learns this way that it has lost ownership and stops.
//
// # Where tokens come from
//
// The lease package issues tokens, not this one: its acquire script
// advances a counter kept per lease key (it expires a second after its last
// token: the clock's floor below keeps tokens growing) in the same
// atomic step that grants the lease. Tokens therefore grow strictly with each
// acquisition. The counter is floored by the Redis clock in µs, so tokens are
// large (about 1.8e15, below 2^53) and still grow after a Redis restart or
// failover that lost the counter's last increments, as long as the Redis
// hosts' clocks agree to within the failover time. 0 means "no token" and is
// refused as invalid input (ErrInvalid). The owner carries its token into every write it makes
// and, in the Fencing-Token header (SetHeader, FromHeader), to downstream
// services.
//
// # What is guaranteed
//
// For each resource, a guard remembers the highest token it has admitted. A
// token lower than that is refused with a *StaleError (errors.Is(err,
// ErrStale)) that reports the highest, and changes nothing. An equal token is
// admitted: it is the same owner writing again. A higher token is admitted
// and becomes the highest. Tokens of different resources are independent.
//
// Leasehold's store keeps this in Redis (store.Fence), in one hash per
// resource (the key comes from internal/store/keys): the highest token, the
// last value and the token it was written with. Fence.Write checks and writes in one Lua script, so no write
// with a lower token can land after a higher one was accepted, even under
// concurrent writers and on a Redis Cluster. Fence.Admit moves the highest
// without storing a value. The hashes have no TTL: a forgotten highest token
// would let a stale owner write again.
//
// Memory keeps the same in process memory, for a downstream service that
// runs as one process and does not share Redis. Both are a Guard, which
// Middleware uses to put a downstream HTTP service behind the fence: 400 for
// a missing or malformed token, 409 for a stale one, 503 with Retry-After when
// the guard cannot answer.
//
// A fence is only as durable as the store holding it: a highest token written
// to a Redis primary just before an asynchronous failover can be lost (then a
// lower token than one already admitted may be admitted once), and a Memory
// forgets all on restart.
package fencing
