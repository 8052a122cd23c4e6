-- KEYS[1] mark: this event id was counted in this counter
-- KEYS[2] the tenant's counts for the event's UTC day (field: counter)
-- ARGV[1] counter   ARGV[2] n (decimal, kept a string: it may exceed 2^53)
-- ARGV[3] mark_ttl_ms
-- ARGV[4] drop_at_ms: Unix time in ms when the day's counts are dropped
-- Returns {1} when n was added; {0, first_n} when the event had been counted
-- already, with the n (a string) it was counted with; {-1} when the day's
-- counts are dropped already, so that counting into them would vanish at once.
local mark, day = KEYS[1], KEYS[2]
local counter, n = ARGV[1], ARGV[2]
local mark_ttl, drop_at = tonumber(ARGV[3]), tonumber(ARGV[4])

-- Mark and increment in one step: a retried write finds the mark and adds
-- nothing, however the first attempt's reply was lost.
local seen = redis.call('GET', mark)
if seen then
  return {0, seen}
end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if drop_at <= now then
  return {-1}
end
-- The increment goes first: if it fails (the count would overflow), the
-- script stops before the mark is set, and nothing has changed.
redis.call('HINCRBY', day, counter, n)
redis.call('SET', mark, n, 'PX', mark_ttl)
redis.call('PEXPIRE', day, drop_at - now)
return {1}
