-- Reads which tenants have schedules due now, for a take
-- (schedule_due.lua) to take from (redis_now, int: transition.lua). Nothing
-- due: one ZRANGEBYSCORE, no write.
-- KEYS[1] the index of tenants with schedules due
-- ARGV[1] the most tenants to read
-- Returns {now (ms), tenant, tenant, ...}, those looked at longest ago first.
local now = redis_now()
local reply = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[1]))
table.insert(reply, 1, int(now))
return reply
