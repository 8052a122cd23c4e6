-- KEYS[1] counter of the subject's current fixed window
-- ARGV[1] limit   ARGV[2] window_us   ARGV[3] cost
-- Windows are [k * window_us, (k + 1) * window_us) of Redis time in µs. The
-- first request of a window creates the counter and gives it the window's
-- remaining time to live; its expiry is the window's end. Redis counts
-- expiry in whole milliseconds and keeps a key through its expiry
-- millisecond, so a counter may outlive its window by up to 2 ms and count
-- requests made that early in the next window against its own.
-- Returns {allowed, remaining, reset_us, retry_after_us}: allowed is 1 when
-- cost was added, 0 when it does not fit (then nothing changes); remaining
-- how many more would fit; reset_us the time until the counter is gone (the
-- window's end plus those 2 ms); retry_after_us the same when denied, else 0.
local counter = KEYS[1]
local limit, window, cost = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local left = window - now % window
local ttl_ms = math.ceil(left / 1000)
local reset = left + 2000

local ttl = redis.call('PTTL', counter)
if ttl == -1 then
  -- A counter without expiry would hold its subject to its count forever.
  -- This script never leaves one behind (it counts and sets the expiry in
  -- one step), but one written otherwise (a crash between INCR and PEXPIRE
  -- in an older, non-atomic writer, an operator, a restore) gets its expiry
  -- back here, so the subject is free again at this window's end.
  redis.call('PEXPIRE', counter, ttl_ms)
end

local count = tonumber(redis.call('GET', counter) or '0')
if count + cost > limit then
  return {0, math.max(0, limit - count), reset, reset}
end
redis.call('INCRBY', counter, cost)
if ttl == -2 then
  redis.call('PEXPIRE', counter, ttl_ms)
end
return {1, limit - count - cost, reset, 0}
