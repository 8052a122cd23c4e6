-- Sends a signal to a job: a job waiting for its name is resumed (a move
-- to queued, transition.lua) with it; any other job not ended keeps it for
-- a later wait of that name (signal.lua), which takes it in the same step
-- as it would start waiting (execution_finish.lua). A second signal of a
-- name still kept replaces the first.
-- KEYS[1] job hash   KEYS[2] ready   KEYS[3] scheduled   KEYS[4] stats
-- KEYS[5] events   KEYS[6] fair   KEYS[7] the job's lane (fair.lua)
-- KEYS[8] retired   KEYS[9] folded key (transition.lua's fold)
-- ARGV[1] tenant of the caller ("" = admin, any tenant)   ARGV[2] name
-- ARGV[3] data (JSON)   ARGV[4] events stream MAXLEN
-- ARGV[5] at most this many signals kept per job   ARGV[6] and this many
-- bytes of their data   ARGV[7] the job's id
-- (signalCall in internal/store/job_calls.go is the one place in Go that lays these KEYS and
-- ARGV out: change the two together.)
-- Fails with unpack_first's reply (transition.lua) when the job is packed.
-- Returns {'missing'} when there is no such job for this caller, else
-- {outcome, the job's record (record, transition.lua)}: outcome is 'resumed' (it waited for this
-- signal: queued now), 'kept', 'ended' (terminal: nothing changed) or
-- 'full' (kept signals at their bound: nothing changed).
local job, ready, scheduled, stats, events, fair, lane, retired =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local tenant, name, data, maxlen, id = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[7]
local max_pending, max_bytes = tonumber(ARGV[5]), tonumber(ARGV[6])

local f = redis.call('HMGET', job, 'tenant', 'state', 'wait_for', 'attempt', 'concurrency_keys', 'priority',
  'sig:' .. name, 'signals_pending', 'signals_bytes', 'states', 'kind')
local state = f[2]
f[4], f[6] = f[4] or '0', f[6] or '0' -- attempt and priority, implied when absent (transition.lua)
if not state and packed_for(KEYS[9], tenant) then
  return unpack_first({1, 9})
end
-- Another tenant's job is as absent as one that never existed.
if not state or (tenant ~= '' and f[1] ~= tenant) then
  return {'missing'}
end
if terminal(state) then
  return {'ended', record(job, KEYS[9])}
end

if state == 'waiting' and f[3] == name then
  redis.call('ZREM', scheduled, id) -- its timeout
  local tx = transitions(stats, retired, redis_now(), nil, maxlen)
  fair_push(fair, ready, lane, fair_lane(f[11], f[5]), id, tonumber(f[6]), tx.now)
  local fields = {}
  resumed(fields, signal_json(name, data, false))
  move(tx, {key = job, events = events, id = id, tenant = f[1], state = state, states = f[10]}, 'queued', fields, f[4],
    with(shown_of(job), fields))
  settle(tx)
  return {'resumed', record(job, KEYS[9])}
end

local pending, bytes = tonumber(f[8]) or 0, tonumber(f[9]) or 0
local old = f[7]
if old then
  pending, bytes = pending - 1, bytes - #old -- replaced
end
if pending + 1 > max_pending or bytes + #data > max_bytes then
  return {'full', record(job, KEYS[9])}
end
redis.call('HSET', job, 'sig:' .. name, data, 'signals_pending', pending + 1, 'signals_bytes', bytes + #data)
return {'kept', record(job, KEYS[9])}
