-- Moves one schedule from the due index of an earlier version into its
-- tenant's due index, at the same score, unless it was deleted or paused
-- meanwhile.
-- KEYS[1] the earlier version's due index   KEYS[2] the schedule's record
-- KEYS[3] the tenant's due index   KEYS[4] the index of tenants with schedules due
-- ARGV[1] its member there, "<tenant>/<name>"   ARGV[2] tenant   ARGV[3] name
-- Returns 1 when it moved it, 0 when it only dropped it.
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[1], ARGV[1])
if not score or redis.call('HGET', KEYS[2], 'paused') ~= '0' then
  return 0
end
redis.call('ZADD', KEYS[3], score, ARGV[3])
redis.call('ZADD', KEYS[4], 'LT', score, ARGV[2])
return 1
