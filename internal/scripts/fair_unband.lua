-- Writes again, as their turns alone, the ready scores that a version
-- before priority left the ready set (2c2eec2) wrote with a priority band
-- above the turn (fair.lua, fair_start): such a lane sorts behind every
-- other, and a submit to a lane that has jobs no longer reads its turn to
-- mend it. The reaper runs it at each pass; a ready set with none costs
-- one read.
-- KEYS[1] ready
-- ARGV[1] at most this many lanes
-- Returns how many lanes it placed again.
local ready, most = KEYS[1], tonumber(ARGV[1])
local banded = redis.call('ZRANGE', ready, fair_int(FAIR_BAND), '+inf', 'BYSCORE', 'WITHSCORES', 'LIMIT', 0, most)
for i = 1, #banded, 2 do
  redis.call('ZADD', ready, fair_int(fair_start(tonumber(banded[i + 1]))), banded[i])
end
return #banded / 2
