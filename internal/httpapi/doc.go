// Package httpapi is Leasehold's HTTP API, v1: submit, read, list, cancel
// and stream jobs, see queue counts and each tenant's usage
// (GET /v1/usage, counts per UTC day), and the operational endpoints
// (/healthz, /readyz, /metrics, /openapi.yaml). docs/openapi.yaml describes
// every request and response; New builds the handler that serves them.
//
// # Guarantees
//
//   - Bad input changes nothing. A request is authenticated, its content
//     type, size and JSON checked, and its values validated before the first
//     write; every refusal is an RFC 9457 problem (application/problem+json)
//     that names each bad field.
//   - Tenants are isolated. A job belongs to the tenant whose key submitted
//     it; another tenant's job is answered exactly like a job that does not
//     exist (404, the same body). The tenant "admin" sees and acts on every
//     job. API keys are compared in constant time, against every key.
//   - Redis trouble is 503 with Retry-After, never a 429 and never a hang:
//     every request's Redis work runs under RedisTimeout (plus the wait it
//     asked for, for ?wait= and event streams). NATS trouble is no error at
//     all: wake-ups and cancel messages are only the fast path.
//   - A submission over its tenant's rate (Config.Rate) is 429 with
//     Retry-After and the RateLimit headers, and writes nothing. Only a
//     valid request that would create a job spends a unit: a 4xx found by
//     decoding and validation spends nothing, and neither does the replay
//     of an Idempotency-Key whose record exists (two first requests racing
//     with one key may each spend one). A limiter that cannot reach Redis
//     is a 503, never a 429.
//   - A cancel that answered 202 is recorded in Redis: the job record first
//     (store.Store.Cancel), then, for a running job, the cancel flag its owner
//     polls (cancel.Flags.Request), then the NATS message. A retry after a
//     503 completes whatever step was missing.
//
// # Waiting without polling
//
// GET /v1/jobs/{id}?wait= and GET /v1/jobs/{id}/events both sleep in
// XREAD BLOCK on the job's event stream (store.Store.Events): every state
// change appends an event in the same script that makes it, so a reader
// that has seen event N and blocks for the events after N cannot miss a
// transition. Each such request holds one Redis connection while it
// blocks; size the client's pool for the waiters you expect.
//
// # Event streams
//
// Server-sent events replay the job's stream from the start (or after
// Last-Event-ID), follow it live and end after the terminal state event.
// The stream stores a state event as {"state", "attempt"}; the API sends
// the job object instead, read once per batch of events, with state and
// attempt taken from the event. So the last state event of a stream shows
// the job exactly as it ended, and an older, replayed one shows the job as
// it stands now, in that event's state.
package httpapi
