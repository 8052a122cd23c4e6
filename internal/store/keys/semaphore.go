package keys

import (
	"strings"
	"unicode"
)

// Semaphore wait keys. A lease key's waiting line shares the lease set's
// hash tag {lease:<key>}, so one script can reap the line, check the set and
// grant a slot atomically on a Redis Cluster too. Lease keys are validated
// by package lease before they get here: no braces.

// SemQueue is the sorted set of a lease key's waiting tickets in arrival
// order (member: ticket id, score: arrival sequence from SemSeq).
func (s Space) SemQueue(key string) string { return s.key("lease:"+key, "queue") }

// SemTickets is the sorted set of the same tickets by expiry (member:
// ticket id, score: expiry in Redis-clock milliseconds), so dead waiters are
// found without scanning the line.
func (s Space) SemTickets(key string) string { return s.key("lease:"+key, "tickets") }

// SemSeq is the arrival counter that numbers a lease key's tickets.
func (s Space) SemSeq(key string) string { return s.key("lease:"+key, "seq") }

// SemTicket is one ticket's state (PENDING, GRANTED, CANCELLED, TIMED_OUT),
// expiring with the ticket.
func (s Space) SemTicket(key, ticket string) string {
	return s.key("lease:"+key, "ticket:"+ticket)
}

// SemWake is the NATS subject on which a lease key's waiters are woken. It
// is one literal token built from the prefix and the key: characters a NATS
// subject token cannot hold become '_'. Two keys that map to one subject
// only wake each other's waiters for nothing; a wake-up is a hint.
func (s Space) SemWake(key string) string {
	return strings.Map(func(r rune) rune {
		if r == '.' || r == '*' || r == '>' || unicode.IsSpace(r) || unicode.IsControl(r) {
			return '_'
		}
		return r
	}, s.prefix+"wake:"+key)
}

// ShareKey is the lease key whose slots and budget are one tenant's share
// of key, whose limit has a per_tenant share: "<key>@<tenant key>", which
// no job can name ('@' is not allowed in a concurrency key).
func ShareKey(key, tenantKey string) string { return key + "@" + tenantKey }
