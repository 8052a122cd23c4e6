-- Records one try of a delivery (transition.lua's deliver) and what comes
-- next: another try at a due time, or none.
-- KEYS[1] outbox   KEYS[2] job hash   KEYS[3] folded key (transition.lua's fold)
-- ARGV[1] member ("<tenant>/<job id>")   ARGV[2] the delivery's id (webhook-id)
-- ARGV[3] its state after the try: pending (tried again after ARGV[4]),
--   delivered or failed
-- ARGV[4] backoff_ms before the next try (pending only)
-- ARGV[5] the try, JSON {at, status, error}   ARGV[6] tries kept
-- Returns the delivery's attempts after the try, or 0 when it is not the
-- job's current delivery or no longer pending (the job ended again, and
-- the new delivery is its own; or another drainer recorded its end):
-- nothing changed.
local outbox, job = KEYS[1], KEYS[2]
local member, id, state, backoff, try, kept = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], tonumber(ARGV[6])

-- The tries may be folded (long): they are read from there, and the
-- hash's new ones win over them (fields_of, record).
local f = fields_of(job, KEYS[3], {'webhook_id', 'webhook_state', 'webhook_first_at', 'webhook_tries'})
if f[1] ~= id or f[2] ~= 'pending' then
  return 0
end
local now = redis_now()
local tries = cjson.decode(f[4] or '[]')
tries[#tries + 1] = cjson.decode(try)
while #tries > kept do
  table.remove(tries, 1)
end
local fields = {'webhook_state', state, 'webhook_tries', cjson.encode(tries)}
if not f[3] or f[3] == '' then
  fields[#fields + 1], fields[#fields + 2] = 'webhook_first_at', int(now)
end
redis.call('HSET', job, unpack(fields))
if state == 'pending' then
  redis.call('ZADD', outbox, int(now + tonumber(backoff)), member)
else
  redis.call('ZREM', outbox, member)
end
return redis.call('HINCRBY', job, 'webhook_attempts', 1)
