-- Renews the leases of one worker's executions in a queue, in one trip.
-- KEYS[1] leases, then for each execution: its job hash
-- ARGV[1] lease ttl_ms, then for each execution: job id, token, execution id
-- (heartbeatArgs in internal/store/exec_heartbeat.go is the one place in Go that lays
-- these KEYS and ARGV out: change the two together.)
-- (The slots of its concurrency keys are renewed apart, in their own
-- slots: lease_renew.lua.)
-- Returns, for each execution: 0 when it is no longer the owner (lease gone
-- or expired, or its token or execution id is not the job's current one:
-- stop now),
-- 1 when renewed, 2 when renewed and a cancel has been requested.
local leases = KEYS[1]
local ttl = tonumber(ARGV[1])

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
-- now is truncated to the millisecond: round the expiry up, so the lease
-- never ends before the owner's trust window (sent + ttl) does.
local expires = string.format('%d', now + 1 + ttl)

local out = {}
local k, a = 2, 2 -- next KEYS and ARGV positions
while a <= #ARGV do
  local job, id, token, exec = KEYS[k], ARGV[a], ARGV[a + 1], ARGV[a + 2]
  local f = redis.call('HMGET', job, 'token', 'state', 'cancel_requested', 'exec_id')
  local lease = redis.call('ZSCORE', leases, id)
  -- An expired lease is left for the reaper, which finalises the job: the
  -- owner's trust ended with it.
  -- The execution id as well as the token: two executions never both
  -- renew, even with equal tokens (docs/architecture.md, "Fencing tokens").
  if f[1] ~= token or f[4] ~= exec or f[2] ~= 'running' or not lease or tonumber(lease) <= now then
    out[#out + 1] = 0
  else
    redis.call('ZADD', leases, 'XX', expires, id)
    redis.call('HSET', job, 'exec_heartbeat_at', string.format('%d', now))
    out[#out + 1] = f[3] == '1' and 2 or 1
  end
  k, a = k + 1, a + 3
end
return out
