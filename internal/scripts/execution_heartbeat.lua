-- Renews the leases of one worker's executions in a queue, in one trip.
-- KEYS[1] leases, KEYS[1 + i] job hash of execution i
-- ARGV[1] lease ttl_ms, ARGV[2i] job id and ARGV[2i + 1] token of execution i
-- Returns, for each execution: 0 when it is no longer the owner (lease gone
-- or expired, or its token is not the job's current one: stop now),
-- 1 when renewed, 2 when renewed and a cancel has been requested.
local leases = KEYS[1]
local ttl = tonumber(ARGV[1])

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
-- now is truncated to the millisecond: round the expiry up, so the lease
-- never ends before the owner's trust window (sent + ttl) does.
local expires = string.format('%.0f', now + 1 + ttl)

local out = {}
for i = 1, #KEYS - 1 do
  local job, id, token = KEYS[1 + i], ARGV[2 * i], ARGV[2 * i + 1]
  local f = redis.call('HMGET', job, 'token', 'state', 'cancel_requested')
  local lease = redis.call('ZSCORE', leases, id)
  -- An expired lease is left for the reaper, which finalises the job: the
  -- owner's trust ended with it.
  if f[1] ~= token or f[2] ~= 'running' or not lease or tonumber(lease) <= now then
    out[i] = 0
  else
    redis.call('ZADD', leases, 'XX', expires, id)
    redis.call('HSET', job, 'exec_heartbeat_at', string.format('%.0f', now))
    out[i] = f[3] == '1' and 2 or 1
  end
end
return out
