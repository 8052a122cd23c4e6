-- fence_set sets the counter at key fence to v (with a TTL of px ms, when
-- given) and returns what it held.
local function fence_set(fence, v, px)
  if px then
    return redis.call('SET', fence, string.format('%d', v), 'PX', px, 'GET')
  end
  return redis.call('SET', fence, string.format('%d', v), 'GET')
end

-- fence_take issues n fencing tokens from the counter at key fence and
-- returns the one before the first: the caller's tokens are base + 1 ..
-- base + n, distinct and increasing. base is the counter floored by the
-- Redis clock in µs (now_us, as clock_us reads it), so a token is
-- max(counter + 1, TIME in µs): a Redis that lost the counter's last
-- increments (a restart without its AOF tail, a failover to a replica that
-- missed them) still issues tokens above every one issued before, as long
-- as its clock is not behind the old primary's by more than the time the
-- switch took (docs/architecture.md, "Fencing tokens"). TIME in µs is
-- about 1.8e15 in 2026: tokens stay exact in a Lua number and below 2^53
-- (9.0e15) for two more centuries. px, when given, is the counter's new
-- TTL in ms.
--
-- The counter is seldom ahead of the clock, so the clock's tokens are
-- written first, by one SET that reads the counter as it was, and a second
-- SET follows only when it was ahead.
local function fence_take(fence, n, now_us, px)
  local was = tonumber(fence_set(fence, now_us + n, px) or '0')
  if was <= now_us then
    return now_us
  end
  fence_set(fence, was + n, px)
  return was
end

-- clock_us is the Redis clock in µs.
local function clock_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end
