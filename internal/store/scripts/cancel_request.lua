-- KEYS[1] cancel flag
-- ARGV[1] ttl_ms: the flag must live at least this long from now
-- Returns the flag's remaining life in ms after the call (>= ttl_ms), or -1
-- when it already existed without an expiry.
-- The flag's value is the time of the first request, in Redis-clock ms (a
-- flag written before that was recorded holds "1"): workers measure cancel
-- latency from it.
--
-- A flag that already outlives ttl_ms keeps its expiry: a later request with
-- a shorter ttl must not make the flag vanish before an earlier request said
-- it would live. There is no fencing token to check: whoever may cancel may
-- do so, and this script only ever lengthens the flag's life. Expiry is
-- relative (PTTL, PX), so Redis measures it on its own clock.
local flag = KEYS[1]
local ttl = tonumber(ARGV[1])

local left = redis.call('PTTL', flag)
-- PTTL is -2 when the flag is missing (less than any ttl: set it) and -1 when
-- it never expires (longer than any ttl: keep it).
if left == -1 or left >= ttl then
  return left
end
if left >= 0 then
  redis.call('PEXPIRE', flag, ttl) -- keeps the first request's time
  return ttl
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('SET', flag, string.format('%d', now), 'PX', ttl)
return ttl
