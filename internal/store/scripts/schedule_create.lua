-- Creates a schedule, unless one of its name exists (redis_now, int: transition.lua).
-- KEYS[1] the schedule's record   KEYS[2] the tenant's due index
-- KEYS[3] the tenant's names   KEYS[4] the index of tenants with schedules due
-- ARGV[1] tenant   ARGV[2] name   ARGV[3] spec (canonical JSON)
-- ARGV[4] generation (a fresh id; also this call's nonce)   ARGV[5] next_run_at (ms)
-- ARGV[6] the most schedules the tenant may have
-- Returns {1, HGETALL} when created (also to a resent call that had created
-- it: the generation is its own), {0, HGETALL} when the name was taken,
-- {-1, n} when the tenant has n schedules, ARGV[6] or more, and the name is
-- new. Counting here, in the script that adds the name, keeps API
-- processes that create at once from passing the cap together.
local rec, due, names, tenants = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
if redis.call('EXISTS', rec) == 1 then
  local created = 0
  if redis.call('HGET', rec, 'gen') == ARGV[4] then
    created = 1
  end
  return {created, redis.call('HGETALL', rec)}
end
local n = redis.call('ZCARD', names)
if n >= tonumber(ARGV[6]) then
  return {-1, n}
end
redis.call('HSET', rec, 'name', ARGV[2], 'spec', ARGV[3], 'gen', ARGV[4], 'paused', '0',
  'next', ARGV[5], 'last_run', '', 'last_job', '', 'last_queue', '', 'created', int(redis_now()))
redis.call('ZADD', due, ARGV[5], ARGV[2])
redis.call('ZADD', tenants, 'LT', ARGV[5], ARGV[1])
redis.call('ZADD', names, 0, ARGV[2])
return {1, redis.call('HGETALL', rec)}
