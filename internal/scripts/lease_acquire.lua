-- KEYS[1] lease set (member: holder, score: expiry in ms on the Redis clock)
-- KEYS[2] fencing-token counter of the lease key
-- ARGV[1] holder   ARGV[2] ttl_ms   ARGV[3] limit
-- Returns {1, token, expires_at_ms} when acquired (or re-acquired by the same
-- holder, which moves its expiry and never takes a second slot),
-- {0, retry_after_ms} when the set is full: the time until its earliest
-- lease expires.
local leases, fence = KEYS[1], KEYS[2]
local holder, ttl, limit = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

-- Reap lazily: whoever acquires cleans up after the dead.
redis.call('ZREMRANGEBYSCORE', leases, '-inf', now)

if not redis.call('ZSCORE', leases, holder) and redis.call('ZCARD', leases) >= limit then
  local earliest = redis.call('ZRANGE', leases, 0, 0, 'WITHSCORES')
  return {0, math.max(1, tonumber(earliest[2]) - now)}
end

-- now is truncated to the millisecond: round the expiry up, so the lease
-- never ends before the holder's trust window (sent + ttl) does.
local expires = now + 1 + ttl
redis.call('ZADD', leases, expires, holder)
-- The set outlives its longest lease, then vanishes: it expires at the
-- latest lease's own expiry, on the same clock (a PEXPIRE of ttl would end
-- it up to 2 ms before that lease, and before its holder's trust window).
-- PEXPIRETIME is -1 with no expiry yet. The counter never expires, so
-- tokens never go back.
if redis.call('PEXPIRETIME', leases) < expires then
  redis.call('PEXPIREAT', leases, expires)
end
return {1, redis.call('INCR', fence), expires}
