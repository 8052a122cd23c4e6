-- KEYS[1] log: sorted set of the requests admitted in the last window
--         (member: unique id, score: Redis time in µs)
-- ARGV[1] limit   ARGV[2] window_us   ARGV[3] cost
-- ARGV[4] id: random, drawn by the caller for this call alone
-- The window is (now - window_us, now]. Returns {allowed, remaining,
-- reset_us, retry_after_us}: allowed is 1 when cost more requests fit and
-- were logged as members id:1 .. id:cost, 0 when they do not (then nothing
-- is logged); remaining how many more would fit; reset_us the time until the
-- log is empty; retry_after_us the time until enough of the oldest entries
-- have left the window for cost to fit (0 if allowed).
local log = KEYS[1]
local limit, window, cost, id = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])

redis.call('ZREMRANGEBYSCORE', log, '-inf', now - window)
local count = redis.call('ZCARD', log)

-- µs until the entry at rank (0 = oldest, -1 = newest) leaves the window.
local function leaves(rank)
  local entry = redis.call('ZRANGE', log, rank, rank, 'WITHSCORES')
  return tonumber(entry[2]) + window - now
end

-- Go refuses cost > limit, so a denied call always finds an entry to wait for.
if count + cost > limit then
  return {0, math.max(0, limit - count), leaves(-1), leaves(count + cost - limit - 1)}
end
-- Never the bare timestamp as member: requests in the same µs, or the cost
-- entries of one call, would collapse into one entry and be undercounted.
for i = 1, cost do
  redis.call('ZADD', log, now, id .. ':' .. i)
end
-- Expiry counts whole ms from a Redis time up to 1 ms behind now: round up
-- and add 1, so the log never vanishes while an entry is still in the window.
redis.call('PEXPIRE', log, math.ceil(window / 1000) + 1)
return {1, limit - count - cost, window, 0}
