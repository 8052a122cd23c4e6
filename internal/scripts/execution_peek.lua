-- Finds the work a claim may do, reading only. The claim script takes these
-- candidates' keys through KEYS and re-checks every one of them.
-- KEYS[1] ready   KEYS[2] scheduled   KEYS[3] leases   KEYS[4] deadlines
-- KEYS[5] retired
-- ARGV[1] ready lanes wanted   ARGV[2] at most this many of each kind of due work
-- Returns {ready lanes (best first, see fair.lua), scheduled ids now due,
-- ids of expired leases, ids past their max_wait, ids of terminal jobs
-- past their retention}.
local ready, scheduled, leases, deadlines, retired = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local want, batch = tonumber(ARGV[1]), tonumber(ARGV[2])

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local top = {}
if want > 0 then
  top = redis.call('ZRANGE', ready, 0, want - 1)
end
return {
  top,
  redis.call('ZRANGE', scheduled, '-inf', now, 'BYSCORE', 'LIMIT', 0, batch),
  redis.call('ZRANGE', leases, '-inf', now, 'BYSCORE', 'LIMIT', 0, batch),
  redis.call('ZRANGE', deadlines, '-inf', now, 'BYSCORE', 'LIMIT', 0, batch),
  redis.call('ZRANGE', retired, '-inf', now, 'BYSCORE', 'LIMIT', 0, batch),
}
