-- Cancels a job: at once when it waits in its queue (a move, transition.lua),
-- by request when it runs.
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

local j = job_reader({'id', 'tenant', 'cancel_requested', 'concurrency_keys'}, SHOWN)(job, events)
local f = j.f
j.id = f.id -- the caller names the job by its key
-- Another tenant's job is as absent as one that never existed.
if not f.id or (tenant ~= '' and f.tenant ~= tenant) then
  return {'missing'}
end

if f.state == 'queued' or f.state == 'retrying' then
  fair_remove(fair, ready, KEYS[8], f.concurrency_keys, f.id)
  redis.call('ZREM', scheduled, f.id)
  redis.call('ZREM', deadlines, f.id)
  local tx = transitions(stats, KEYS[9], redis_now(), retention_ms, maxlen)
  move(tx, j, 'cancelled', {'error', cjson.encode({code = 'cancelled', message = 'cancelled while waiting in its queue'})})
  settle(tx)
  return {'cancelled', redis.call('HGETALL', job)}
end

if f.state == 'cancelled' or (f.state == 'running' and f.cancel_requested == '1') then
  return {'unchanged', redis.call('HGETALL', job)}
end

if f.state == 'running' then
  -- The owner (or the reaper, if the owner is gone) finishes it as cancelled.
  redis.call('HSET', job, 'cancel_requested', '1')
  return {'requested', redis.call('HGETALL', job)}
end

return {'finished', redis.call('HGETALL', job)}
