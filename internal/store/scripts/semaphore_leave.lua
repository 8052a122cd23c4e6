-- KEYS[1] ticket queue   KEYS[2] ticket expiries   KEYS[3] this ticket's state
-- ARGV[1] ticket   ARGV[2] terminal state (CANCELLED or TIMED_OUT)
-- ARGV[3] ticket_ttl_ms
-- Takes the ticket out of the line, PENDING → ARGV[2] if it is still
-- PENDING (or unknown: its join may still be on the way). The terminal state
-- is kept for a ticket TTL, so a poll or join that was sent before and
-- arrives after this script finds it and neither queues nor grants.
-- Returns the state the ticket was in: 'PENDING' (now left), 'GRANTED' (the
-- caller holds a slot it must release), 'CANCELLED' or 'TIMED_OUT' (left
-- before), or '' (never joined, or expired and reaped). Idempotent.
-- Complexity: O(log N) in the line's length.
local queue, tickets, state = KEYS[1], KEYS[2], KEYS[3]
local ticket, terminal, ticket_ttl = ARGV[1], ARGV[2], tonumber(ARGV[3])

redis.call('ZREM', queue, ticket)
redis.call('ZREM', tickets, ticket)
local s = redis.call('GET', state)
if not s or s == 'PENDING' then
  redis.call('SET', state, terminal, 'PX', ticket_ttl)
end
return s or ''
