-- Saves an execution's checkpoint, only for the execution that owns the
-- job and while its lease lasts.
-- KEYS[1] job hash   KEYS[2] leases
-- ARGV[1] job id   ARGV[2] token   ARGV[3] execution id   ARGV[4] checkpoint (JSON)
-- Returns 1 when saved, 0 when the token or the execution id is not the
-- job's current one, the job is not running or the lease has expired: a
-- stale writer's checkpoint is refused, even one whose token equals the
-- owner's, and even before the reaper has finalised its execution.
local job, leases = KEYS[1], KEYS[2]
local id, token, exec, checkpoint = ARGV[1], ARGV[2], ARGV[3], ARGV[4]

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local f = redis.call('HMGET', job, 'token', 'state', 'exec_id')
local lease = redis.call('ZSCORE', leases, id)
if f[1] ~= token or f[3] ~= exec or f[2] ~= 'running' or not lease or tonumber(lease) <= now then
  return 0
end
redis.call('HSET', job, 'checkpoint', checkpoint)
return 1
