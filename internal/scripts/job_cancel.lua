-- Cancels a job: at once when it waits in its queue, by request when it runs.
-- KEYS[1] job hash   KEYS[2] ready   KEYS[3] scheduled   KEYS[4] deadlines
-- KEYS[5] stats (stats.lua, finished.lua)   KEYS[6] events   KEYS[7] fair
-- KEYS[8] the job's lane (fair.lua)   KEYS[9] retired
-- ARGV[1] tenant of the caller ("" = admin, any tenant)
-- ARGV[2] retention_ms (of a job that became terminal)
-- ARGV[3] events stream MAXLEN
-- Returns {'missing'} when there is no such job for this caller, else
-- {outcome, HGETALL of the job} where outcome is 'cancelled' (now terminal),
-- 'requested' (running; cancel_requested set), 'unchanged' (already cancelled
-- or requested) or 'finished' (it ended otherwise: succeeded, failed, expired).
local job, ready, scheduled, deadlines, stats, events, fair = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7]
local tenant, retention_ms, maxlen = ARGV[1], ARGV[2], ARGV[3]

local f = redis.call('HMGET', job, 'id', 'tenant', 'state', 'cancel_requested', 'attempt', 'concurrency_keys')
local id, owner, state, requested, attempt = f[1], f[2], f[3], f[4], f[5]
-- Another tenant's job is as absent as one that never existed.
if not id or (tenant ~= '' and owner ~= tenant) then
  return {'missing'}
end

if state == 'queued' or state == 'retrying' then
  fair_remove(fair, ready, KEYS[8], f[6], id)
  redis.call('ZREM', scheduled, id)
  redis.call('ZREM', deadlines, id)
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  redis.call('HSET', job, 'state', 'cancelled', 'finished_at', now,
    'error', cjson.encode({code = 'cancelled', message = 'cancelled while waiting in its queue'}))
  local counts = {}
  count(counts, owner, state, -1)
  count(counts, owner, 'cancelled', 1)
  write_counts(stats, counts)
  count_finished(stats, now, 'cancelled', 1)
  redis.call('XADD', events, 'MAXLEN', '~', maxlen, '*',
    'type', 'state', 'data', cjson.encode({state = 'cancelled', attempt = tonumber(attempt)}))
  redis.call('ZADD', KEYS[9], string.format('%.0f', now + tonumber(retention_ms)), id)
  return {'cancelled', redis.call('HGETALL', job)}
end

if state == 'cancelled' or (state == 'running' and requested == '1') then
  return {'unchanged', redis.call('HGETALL', job)}
end

if state == 'running' then
  -- The owner (or the reaper, if the owner is gone) finishes it as cancelled.
  redis.call('HSET', job, 'cancel_requested', '1')
  return {'requested', redis.call('HGETALL', job)}
end

return {'finished', redis.call('HGETALL', job)}
