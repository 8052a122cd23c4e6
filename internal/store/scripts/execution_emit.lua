-- Appends an event to a job's stream, only for the execution that owns it.
-- KEYS[1] job hash   KEYS[2] events
-- ARGV[1] token      ARGV[2] type (progress | output | log)   ARGV[3] data (JSON)
-- ARGV[4] events MAXLEN   ARGV[5] execution id
-- Returns the event id, or "" when the token or the execution id is not
-- the job's current one or the job is not running: a stale writer's event
-- is refused, even one whose token equals the owner's. The job's first
-- emitted event gives it its stream (states.lua).
local job, events = KEYS[1], KEYS[2]
local token, kind, data, maxlen, exec = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]

local f = redis.call('HMGET', job, 'token', 'state', 'exec_id', 'states')
if f[1] ~= token or f[3] ~= exec or f[2] ~= 'running' then
  return ''
end
if f[4] then
  stream_states({key = job, events = events}, f[4])
end
return redis.call('XADD', events, 'MAXLEN', '~', maxlen, '*', 'type', kind, 'data', data)
