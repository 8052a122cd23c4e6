// Package webhook delivers the ends of jobs to their webhooks: one POST of
// the job object, signed per Standard Webhooks, at least once, whatever
// process dies.
//
// A job submitted with a webhook URL keeps it in its record. The move that
// ends the job (internal/store/scripts/transition.lua, for every terminal state:
// succeeded, failed, cancelled, expired) adds a delivery to its queue's
// outbox, a sorted set in the queue's slot scored by when the next try is
// due, and gives the delivery a new id, in the same script as the end: a
// job is never recorded ended without its delivery, and no crash can come
// between the two.
//
// A Drainer, run in every worker, API and dev process, takes due
// deliveries for a hold (two timeouts and a second) and tries each:
//
//	pending ──2xx──▶ delivered
//	   │ ▲
//	   └─┘ another answer, no answer within the timeout (10 s), a
//	       redirect (never followed), or a URL the Policy refuses:
//	       tried again after a backoff (5 s doubling to 1 h, with jitter)
//	   │
//	   └──24 h of failed tries since the first──▶ failed
//
// A drainer that dies holding a delivery leaves it in the outbox, due
// again when its hold ends: another drainer tries it with the same
// webhook-id. Receivers deduplicate on that id; a try whose answer was
// lost is tried again.
//
// A try sends webhook-id, webhook-timestamp (Unix seconds) and
// webhook-signature: "v1,<base64 HMAC-SHA256 of id.timestamp.body>" with
// the key of each of the tenant's secrets (two while rotating: two
// signatures). Tries in flight are bounded per drainer (Concurrency) and
// per tenant (PerTenant), so a slow receiver holds at most its tenant's
// share, each for at most the timeout; answers are read to 64 KiB.
//
// Each try is recorded on the job (its webhook state, attempts and last 20
// tries) without a state event: the job's event stream still ends at its
// terminal state. A try's error is in the drainer's own words ("connection
// failed", "answered HTTP 503", "no answer within 10s"): the tenant reads
// it, and what the far end sent (a banner, a reason phrase) goes to the
// log only.
package webhook
