-- Counts events in one of a tenant's counters, each once: n to the
-- counter of the event's UTC day, unless the event was counted already.
-- A mark that an event was counted is a field of the tenant's marks hash
-- for the event's UTC day (value n), which lives mark_ttl after its last
-- write; an event is found counted by a mark of its day or of the days
-- either side (a retry whose time crossed a midnight). The field is the
-- event's mark, a 12-byte digest of "<counter>:<event id>" (ratelimit/
-- usage/usage.go says why 12), or, written by the versions before it,
-- "<counter>:<event id>" itself: both are looked up, so an event those
-- counted is not counted again; only the digest is written.
-- KEYS, per event i (from 0): KEYS[4i+1] the marks of the event's day
-- KEYS[4i+2], KEYS[4i+3] those of the day before and after
-- KEYS[4i+4] the tenant's counts for the event's day (field: counter)
-- ARGV[1] counter   ARGV[2] n (decimal, kept a string: it may exceed 2^53)
-- ARGV[3] mark_ttl_ms   then per event ARGV[4+3i] event id
-- ARGV[5+3i] its mark   ARGV[6+3i] drop_at_ms: Unix time in ms when its
-- day's counts are dropped
-- Returns two values per event, in order: 1, 0 when n was added; 0,
-- first_n when the event had been counted already (in this call too), with
-- the n (a string) it was counted with; -1, 0 when the day's counts are
-- dropped already, so that counting into them would vanish at once.
--
-- The events of one day (the same four keys: a worker's batch is mostly
-- one day's) cost a few commands together, not a few each: one HMGET of
-- each marks hash, one HINCRBY, one HSET of the new marks.
local counter, n, mark_ttl = ARGV[1], ARGV[2], tonumber(ARGV[3])

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local days, order = {}, {}
for i = 0, #KEYS / 4 - 1 do
  local d = days[KEYS[4 * i + 1]]
  if not d then
    d = {base = 4 * i, events = {}, fields = {}, olds = {}}
    days[KEYS[4 * i + 1]] = d
    order[#order + 1] = d
  end
  d.events[#d.events + 1] = i
  d.fields[#d.fields + 1] = ARGV[5 + 3 * i]
  d.olds[#d.olds + 1] = counter .. ':' .. ARGV[4 + 3 * i]
end

-- marks reads the marks of d's events in hash key in both forms, lookup
-- (d.fields then d.olds), in one HMGET: the mark of event k is found[k].
local function marks(key, d, lookup)
  local v, found = redis.call('HMGET', key, unpack(lookup)), {}
  for k = 1, #d.fields do
    found[k] = v[k] or v[#d.fields + k]
  end
  return found
end

local out = {}
for _, d in ipairs(order) do
  local seen, day = KEYS[d.base + 1], KEYS[d.base + 4]
  local lookup = {unpack(d.fields)}
  for _, f in ipairs(d.olds) do
    lookup[#lookup + 1] = f
  end
  local found = {marks(seen, d, lookup), marks(KEYS[d.base + 2], d, lookup), marks(KEYS[d.base + 3], d, lookup)}
  local new, added = {}, {}
  local drop_at = tonumber(ARGV[6 + 3 * d.events[1]]) -- one day: one drop time
  for k, i in ipairs(d.events) do
    local field = d.fields[k]
    local first = found[1][k] or found[2][k] or found[3][k] or added[field]
    if first then
      out[2 * i + 1], out[2 * i + 2] = 0, first
    elseif drop_at <= now then
      out[2 * i + 1], out[2 * i + 2] = -1, 0
    else
      added[field] = n
      new[#new + 1], new[#new + 2] = field, n
      out[2 * i + 1], out[2 * i + 2] = 1, 0
    end
  end
  if #new > 0 then
    -- Mark and increment in one step: a retried write finds the marks and
    -- adds nothing, however the first attempt's reply was lost. The
    -- increment goes first: if it fails (the count would overflow), the
    -- script stops before the marks are set, and these events have not
    -- changed anything.
    local count, fresh = #new / 2, false -- fresh: the counter's first count of the day
    if tonumber(n) * count < 2 ^ 53 then
      local sum = string.format('%.0f', tonumber(n) * count)
      fresh = redis.call('HINCRBY', day, counter, sum) == tonumber(sum)
    else
      for k = 1, count do
        local v = redis.call('HINCRBY', day, counter, n)
        if k == 1 then
          fresh = v == tonumber(n)
        end
      end
    end
    redis.call('HSET', seen, unpack(new))
    redis.call('PEXPIRE', seen, mark_ttl)
    -- The day's counts are dropped at one time whatever writes them: the
    -- first count of each counter sets it (the key is made by one of them,
    -- and a day dropped is never written again: see above).
    if fresh then
      redis.call('PEXPIRE', day, drop_at - now)
    end
  end
end
return out
