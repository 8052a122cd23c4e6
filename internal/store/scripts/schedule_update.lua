-- Replaces an existing schedule's spec and keeps its history (created,
-- paused, last run and job). A new generation makes a fire that read the
-- old spec unable to move the schedule on (schedule_advance.lua compares
-- it), so the next due time set here stands.
-- KEYS[1] the schedule's record   KEYS[2] the tenant's due index
-- KEYS[3] the index of tenants with schedules due
-- ARGV[1] tenant   ARGV[2] name   ARGV[3] spec (canonical JSON)
-- ARGV[4] generation (a fresh id)   ARGV[5] next_run_at (ms)
-- Returns HGETALL of the record after it ({} when there is none). A paused
-- schedule stays paused and out of the due index.
local rec, due, tenants = KEYS[1], KEYS[2], KEYS[3]
local paused = redis.call('HGET', rec, 'paused')
if not paused then
  return {}
end
redis.call('HSET', rec, 'spec', ARGV[3], 'gen', ARGV[4], 'next', ARGV[5])
if paused ~= '1' then
  redis.call('ZADD', due, ARGV[5], ARGV[2])
  redis.call('ZADD', tenants, 'LT', ARGV[5], ARGV[1])
end
return redis.call('HGETALL', rec)
