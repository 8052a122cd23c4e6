-- Cancels a job: at once when it waits in its queue or for a signal (a
-- move, transition.lua), by request when it runs.
-- KEYS[1] job hash   KEYS[2] ready   KEYS[3] scheduled   KEYS[4] deadlines
-- KEYS[5] stats (stats.lua, finished.lua)   KEYS[6] events   KEYS[7] fair
-- KEYS[8] the job's lane (fair.lua)   KEYS[9] retired
-- KEYS[10] the webhook outbox (transition.lua)   KEYS[11] folded key (transition.lua's fold)
-- ARGV[1] tenant of the caller ("" = admin, any tenant)
-- ARGV[2] retention_ms (of a job that became terminal)
-- ARGV[3] events stream MAXLEN   ARGV[4] the job's id
-- (cancelCall in internal/store/job_calls.go is the one place in Go that lays these KEYS and
-- ARGV out: change the two together.)
-- Fails with unpack_first's reply (transition.lua) when the job is packed.
-- Returns {'missing'} when there is no such job for this caller, else
-- {outcome, the job's record (record, transition.lua)} where outcome is 'cancelled' (now terminal),
-- 'requested' (running; cancel_requested set), 'unchanged' (already cancelled
-- or requested) or 'finished' (it ended otherwise: succeeded, failed, expired).
local job, ready, scheduled, deadlines, stats, events, fair = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7]
local tenant, retention_ms, maxlen, id = ARGV[1], ARGV[2], ARGV[3], ARGV[4]

local f = redis.call('HMGET', job, 'tenant', 'state', 'cancel_requested', 'concurrency_keys', 'attempt', 'states', 'kind')
local state = f[2]
f[5] = f[5] or '0' -- attempt, implied when absent (transition.lua)
if not state and packed_for(KEYS[11], tenant) then
  return unpack_first({1, 11})
end
-- Another tenant's job is as absent as one that never existed.
if not state or (tenant ~= '' and f[1] ~= tenant) then
  return {'missing'}
end

if state == 'queued' or state == 'retrying' or state == 'waiting' then
  fair_remove(fair, ready, KEYS[8], fair_lane(f[7], f[4]), id)
  redis.call('ZREM', scheduled, id)
  redis.call('ZREM', deadlines, id)
  local tx = transitions(stats, KEYS[9], redis_now(), retention_ms, maxlen, KEYS[10])
  local fields = {'error', cjson.encode({code = 'cancelled', message = 'cancelled while waiting in its queue'})}
  if state == 'waiting' then
    -- It holds no worker, lease or slot: nothing else to stop.
    fields = {'error', cjson.encode({code = 'cancelled', message = 'cancelled while waiting for a signal'}),
      'wait_for', '', 'wait_until', ''}
  end
  move(tx, {key = job, events = events, id = id, tenant = f[1], state = state, states = f[6]}, 'cancelled', fields, f[5],
    with(shown_of(job), fields))
  settle(tx)
  return {'cancelled', record(job, KEYS[11])}
end

if state == 'cancelled' or (state == 'running' and f[3] == '1') then
  return {'unchanged', record(job, KEYS[11])}
end

if state == 'running' then
  -- The owner (or the reaper, if the owner is gone) finishes it as cancelled.
  redis.call('HSET', job, 'cancel_requested', '1')
  return {'requested', record(job, KEYS[11])}
end

return {'finished', record(job, KEYS[11])}
