-- Takes due deliveries from a queue's webhook outbox (transition.lua's
-- deliver) for a while: a delivery taken is due again when its hold ends,
-- so one whose drainer dies mid-try is tried again by another. (Its try
-- lasts less than the hold: package webhook keeps the hold above the
-- per-try timeout.)
-- KEYS[1] outbox   KEYS[2i] job hash and KEYS[2i + 1] folded key
-- (transition.lua's fold) of delivery i (1..n)
-- ARGV[1] hold_ms of a delivery taken to try   ARGV[2] hold_ms of one deferred
-- ARGV[3] n   then for each delivery: its member ("<tenant>/<job id>"),
--   "1" to take it to try, "0" to defer it (its tenant's tries are all
--   busy: it leaves the head of the outbox for a while, untried)
-- Returns for each delivery its job's record (record, transition.lua)
-- when taken to try, else
-- an empty array: deferred, not due any more (another drainer took it),
-- or dropped from the outbox because its job is gone or has not ended
-- (it was retried: its next end is a delivery of its own).
local outbox = KEYS[1]
local hold, defer, n = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local now = redis_now()

local out = {}
for i = 1, n do
  local member, try = ARGV[2 + 2 * i], ARGV[3 + 2 * i] == '1'
  local due = redis.call('ZSCORE', outbox, member)
  out[i] = {}
  if due and tonumber(due) <= now then
    local state = redis.call('HGET', KEYS[2 * i], 'state')
    if not state or not terminal(state) then
      redis.call('ZREM', outbox, member)
    elseif try then
      redis.call('ZADD', outbox, int(now + hold), member)
      out[i] = record(KEYS[2 * i], KEYS[2 * i + 1])
    else
      redis.call('ZADD', outbox, int(now + defer), member)
    end
  end
end
return out
