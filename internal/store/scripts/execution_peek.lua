-- Finds the work a claim may do, reading only. The claim script takes these
-- candidates' keys through KEYS and re-checks every one of them.
-- KEYS[1] ready   KEYS[2] scheduled   KEYS[3] leases   KEYS[4] deadlines
-- KEYS[5] retired
-- ARGV[1] ready lanes wanted   ARGV[2] at most this many of each kind of due work
-- ARGV[3 ..] the kinds the worker serves: lanes of other kinds (fair.lua's
-- fair_kind) are passed over, at most PEEK_SCAN lanes looked at in all
-- Returns {ready lanes of those kinds (best first, see fair.lua), scheduled
-- ids now due, ids of expired leases, ids past their max_wait, ids of
-- terminal jobs past their retention}.
local ready, scheduled, leases, deadlines, retired = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local want, batch = tonumber(ARGV[1]), tonumber(ARGV[2])

-- PEEK_SCAN bounds the lanes one peek reads past those of kinds the worker
-- does not serve, which other workers take (they keep their turns until
-- then). Lanes of a kind no live worker serves keep theirs for ever: a
-- worker sees past at most this many of them (LEASEHOLD_KINDS refuses an
-- unknown kind at submit).
local PEEK_SCAN = 1024

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local top = {}
if want > 0 then
  local served = {}
  for i = 3, #ARGV do
    served[ARGV[i]] = true
  end
  local from, chunk = 0, want
  while #top < want and from < PEEK_SCAN do
    local lanes = redis.call('ZRANGE', ready, from, math.min(from + chunk, PEEK_SCAN) - 1)
    for _, lane in ipairs(lanes) do
      if served[fair_kind(lane)] and #top < want then
        top[#top + 1] = lane
      end
    end
    if #lanes < chunk then
      break
    end
    from, chunk = from + chunk, chunk * 2
  end
end
return {
  top,
  redis.call('ZRANGE', scheduled, '-inf', now, 'BYSCORE', 'LIMIT', 0, batch),
  redis.call('ZRANGE', leases, '-inf', now, 'BYSCORE', 'LIMIT', 0, batch),
  redis.call('ZRANGE', deadlines, '-inf', now, 'BYSCORE', 'LIMIT', 0, batch),
  redis.call('ZRANGE', retired, '-inf', now, 'BYSCORE', 'LIMIT', 0, batch),
}
