-- Counts events in one of a tenant's counters, each once: n to the
-- counter of the event's UTC day, unless the event was counted already.
-- A mark that an event was counted is a field "<counter>:<event id>" (value
-- n) of the tenant's marks hash for the event's UTC day, which lives
-- mark_ttl after its last write; an event is found counted by a mark of
-- its day or of the days either side (a retry whose time crossed a
-- midnight).
-- KEYS, per event i (from 0): KEYS[4i+1] the marks of the event's day
-- KEYS[4i+2], KEYS[4i+3] those of the day before and after
-- KEYS[4i+4] the tenant's counts for the event's day (field: counter)
-- ARGV[1] counter   ARGV[2] n (decimal, kept a string: it may exceed 2^53)
-- ARGV[3] mark_ttl_ms   then per event ARGV[4+2i] event id
-- ARGV[5+2i] drop_at_ms: Unix time in ms when its day's counts are dropped
-- Returns two values per event, in order: 1, 0 when n was added; 0,
-- first_n when the event had been counted already, with the n (a string)
-- it was counted with; -1, 0 when the day's counts are dropped already, so
-- that counting into them would vanish at once.
local counter, n, mark_ttl = ARGV[1], ARGV[2], tonumber(ARGV[3])

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local out, marked, dropped = {}, {}, {}
for i = 0, #KEYS / 4 - 1 do
  local seen, day = KEYS[4 * i + 1], KEYS[4 * i + 4]
  local field, drop_at = counter .. ':' .. ARGV[4 + 2 * i], tonumber(ARGV[5 + 2 * i])
  -- Mark and increment in one step: a retried write finds the mark and adds
  -- nothing, however the first attempt's reply was lost.
  local first = redis.call('HGET', seen, field) or redis.call('HGET', KEYS[4 * i + 2], field) or
    redis.call('HGET', KEYS[4 * i + 3], field)
  if first then
    out[#out + 1], out[#out + 2] = 0, first
  elseif drop_at <= now then
    out[#out + 1], out[#out + 2] = -1, 0
  else
    -- The increment goes first: if it fails (the count would overflow),
    -- the script stops before the mark is set, and this event has not
    -- changed anything.
    redis.call('HINCRBY', day, counter, n)
    redis.call('HSET', seen, field, n)
    marked[seen], dropped[day] = true, drop_at
    out[#out + 1], out[#out + 2] = 1, 0
  end
end
for seen in pairs(marked) do
  redis.call('PEXPIRE', seen, mark_ttl)
end
for day, drop_at in pairs(dropped) do
  redis.call('PEXPIRE', day, drop_at - now)
end
return out
