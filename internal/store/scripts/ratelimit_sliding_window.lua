-- KEYS[1] sliding window counter hash (fields: idx = number of the current
--         fixed window, cur = its count, prev = the count of the one before)
-- ARGV[1] limit   ARGV[2] window_us   ARGV[3] cost
-- Fixed windows are [k * window_us, (k + 1) * window_us) of Redis time in µs.
-- At e µs into window k the sliding window (now - window_us, now] covers the
-- last window_us - e µs of window k - 1, so the count it is judged by is
-- prev * (window_us - e) / window_us + cur: the previous window's requests
-- taken as evenly spread. Everything is scaled by window_us to stay in exact
-- integers (Go keeps limit * window_us below 2^53).
-- Returns {allowed, remaining, reset_us, retry_after_us}: allowed is 1 when
-- cost was added to cur, 0 when it does not fit (then nothing changes);
-- remaining how many more would fit; reset_us the time until the weighted
-- count is zero; retry_after_us the time until cost fits (0 if allowed).
local counter = KEYS[1]
local limit, window, cost = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local idx = math.floor(now / window)
local e = now - idx * window

local cur, prev = 0, 0
local state = redis.call('HMGET', counter, 'idx', 'cur', 'prev')
if state[1] then
  local last = tonumber(state[1])
  if last == idx then
    cur, prev = tonumber(state[2]), tonumber(state[3])
  elseif last == idx - 1 then
    prev = tonumber(state[2])
  end
end

-- What is left under the limit, in requests * window_us.
local room = limit * window - prev * (window - e) - cur * window

if room < cost * window then
  local reset, retry
  if cur > 0 then reset = 2 * window - e else reset = window - e end
  if cur + cost <= limit then
    -- Later in this window, once prev weighs little enough:
    -- prev * (window - e') <= (limit - cur - cost) * window.
    retry = window - math.floor((limit - cur - cost) * window / prev) - e
  else
    -- In the next window, where cur is the count that is weighted:
    -- cur * (window - e') <= (limit - cost) * window.
    retry = window - e + window - math.floor((limit - cost) * window / cur)
  end
  return {0, math.max(0, math.floor(room / window)), reset, retry}
end

redis.call('HSET', counter, 'idx', idx, 'cur', cur + cost, 'prev', prev)
-- cur matters until the end of the next window. Expiry counts whole ms from a
-- Redis time up to 1 ms behind now: round up and add 1, never early.
local reset = 2 * window - e
redis.call('PEXPIRE', counter, math.ceil(reset / 1000) + 1)
return {1, math.floor((room - cost * window) / window), reset, 0}
