-- Pauses or resumes a schedule. A paused schedule leaves the due index;
-- resuming puts it back at its next due time from now.
-- KEYS[1] the schedule's record   KEYS[2] due index
-- ARGV[1] due member   ARGV[2] "1" pause, "0" resume
-- ARGV[3] resume: the next due time (ms)
-- Returns HGETALL of the record after it ({} when there is none). Pausing a
-- paused schedule, or resuming a running one, changes nothing.
local rec, due = KEYS[1], KEYS[2]
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
  end
end
return redis.call('HGETALL', rec)
