-- fence_take issues n fencing tokens from the counter at key fence and
-- returns the one before the first: the caller's tokens are base + 1 ..
-- base + n, distinct and increasing. base is the counter floored by the
-- Redis clock in µs, so a token is max(counter + 1, TIME in µs): a Redis
-- that lost the counter's last increments (a restart without its AOF tail,
-- a failover to a replica that missed them) still issues tokens above
-- every one issued before, as long as its clock is not behind the old
-- primary's by more than the time the switch took (docs/architecture.md,
-- "Fencing tokens"). TIME in µs is about 1.8e15 in 2026: tokens stay exact
-- in a Lua number and below 2^53 (9.0e15) for two more centuries.
local function fence_take(fence, n)
  local t = redis.call('TIME')
  local base = math.max(tonumber(redis.call('GET', fence) or '0'), tonumber(t[1]) * 1000000 + tonumber(t[2]))
  redis.call('SET', fence, string.format('%.0f', base + n))
  return base
end
