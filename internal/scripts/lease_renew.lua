-- KEYS[1] lease set (member: holder, score: expiry in ms on the Redis clock)
-- ARGV[1] holder   ARGV[2] ttl_ms
-- Returns expires_at_ms when renewed, 0 when the lease is gone: released,
-- reaped, or past its expiry and not yet reaped. A renew never resurrects a
-- lease: once gone, someone else may already hold the slot.
local leases = KEYS[1]
local holder, ttl = ARGV[1], tonumber(ARGV[2])

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local score = redis.call('ZSCORE', leases, holder)
if not score then
  return 0
end
if tonumber(score) <= now then
  redis.call('ZREM', leases, holder)
  return 0
end

-- now is truncated to the millisecond: round the expiry up, so the lease
-- never ends before the holder's trust window (sent + ttl) does.
local expires = now + 1 + ttl
redis.call('ZADD', leases, 'XX', expires, holder)
if redis.call('PEXPIRETIME', leases) < expires then
  redis.call('PEXPIREAT', leases, expires) -- the set outlives its latest lease (see lease_acquire.lua)
end
return expires
