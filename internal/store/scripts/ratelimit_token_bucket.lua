-- KEYS[1] token bucket hash (fields: ticks = tokens held, in ticks;
--         at = Redis time in µs they were counted at)
-- ARGV[1] limit   ARGV[2] period_us   ARGV[3] burst   ARGV[4] cost
-- The bucket holds up to burst tokens and refills limit tokens per period,
-- continuously. A token is period_us ticks, so the refill is limit ticks per
-- µs and all arithmetic is on integers (Go keeps burst * period_us below
-- 2^53, where Lua numbers stop being exact).
-- Returns {allowed, remaining, reset_us, retry_after_us}: allowed is 1 when
-- cost tokens were taken, 0 when fewer are there (then nothing is taken);
-- remaining the whole tokens left; reset_us the time until the bucket is full
-- again; retry_after_us the time until cost tokens are there (0 if allowed).
local bucket = KEYS[1]
local limit, period = tonumber(ARGV[1]), tonumber(ARGV[2])
local burst, cost = tonumber(ARGV[3]), tonumber(ARGV[4])

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local full, need = burst * period, cost * period

-- No key means a full bucket: the key expires only once it has refilled.
local ticks = full
local state = redis.call('HMGET', bucket, 'ticks', 'at')
if state[1] then
  -- After a failover to a node whose clock is behind, now - at is negative:
  -- the bucket drains by as much, and the next refill gives it back.
  ticks = math.min(full, tonumber(state[1]) + (now - tonumber(state[2])) * limit)
end

-- µs until the bucket holds x ticks, rounded up so that waiting is enough.
local function wait_for(x)
  return math.max(0, math.ceil((x - ticks) / limit))
end

if ticks < need then
  return {0, math.max(0, math.floor(ticks / period)), wait_for(full), wait_for(need)}
end
ticks = ticks - need
local reset = wait_for(full)
redis.call('HSET', bucket, 'ticks', ticks, 'at', now)
-- Once full, the bucket is the same as no bucket. Expiry counts whole ms
-- from a Redis time up to 1 ms behind now: round up and add 1, never early.
redis.call('PEXPIRE', bucket, math.ceil(reset / 1000) + 1)
return {1, math.floor(ticks / period), reset, 0}
