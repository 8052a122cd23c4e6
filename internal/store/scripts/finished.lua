-- Counts the jobs of a queue that turned terminal, per minute, over the
-- last hour (Load prepends it): a ring of 60 one-minute slots kept in the
-- queue's stats hash, so every script that ends a job counts it in the
-- same step, and the ring never grows. Slot i holds the minute m with
-- m % 60 == i: field 'm<i>' is m (unix time in minutes) and 'm<i>:<state>'
-- its count of jobs that became state. A slot whose minute has passed an
-- hour ago is cleared by the first count of its new minute; readers skip
-- slots older than the hour (internal/store/job_finished.go).
-- count_finished adds n jobs that became state, a terminal one, at now
-- (Redis ms) to the ring in stats.
local function count_finished(stats, now, state, n)
  local minute = string.format('%d', math.floor(now / 60000))
  local slot = 'm' .. (tonumber(minute) % 60)
  if redis.call('HGET', stats, slot) ~= minute then
    redis.call('HDEL', stats, slot .. ':succeeded', slot .. ':failed', slot .. ':cancelled', slot .. ':expired')
    redis.call('HSET', stats, slot, minute)
  end
  redis.call('HINCRBY', stats, slot .. ':' .. state, n)
end
