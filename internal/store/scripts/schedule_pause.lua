-- Pauses or resumes a schedule. A paused schedule leaves its tenant's due
-- index; resuming puts it back at its next due time from now.
-- KEYS[1] the schedule's record   KEYS[2] the tenant's due index
-- KEYS[3] the index of tenants with schedules due
-- ARGV[1] name   ARGV[2] "1" pause, "0" resume
-- ARGV[3] resume: the next due time (ms)   ARGV[4] tenant
-- Returns HGETALL of the record after it ({} when there is none). Pausing a
-- paused schedule, or resuming a running one, changes nothing.
local rec, due, tenants = KEYS[1], KEYS[2], KEYS[3]
local paused = redis.call('HGET', rec, 'paused')
if not paused then
  return {}
end
if paused ~= ARGV[2] then
  if ARGV[2] == '1' then
    redis.call('HSET', rec, 'paused', '1')
    redis.call('ZREM', due, ARGV[1])
  else
    redis.call('HSET', rec, 'paused', '0', 'next', ARGV[3])
    redis.call('ZADD', due, ARGV[3], ARGV[1])
    redis.call('ZADD', tenants, 'LT', ARGV[3], ARGV[4])
  end
end
return redis.call('HGETALL', rec)
