-- Takes the schedules due now from the due index, for one scheduler to fire
-- (redis_now, int: transition.lua). A taken member's score moves to now +
-- ARGV[2], so other schedulers leave it alone while it is fired, and find
-- it again if this one dies first. Nothing due: one ZRANGEBYSCORE, no write.
-- KEYS[1] due index
-- ARGV[1] the most to take   ARGV[2] how long a take holds them (ms)
-- Returns {now (ms), member, score, member, score, ...}: the members taken
-- with the score each had (the due time it was indexed for).
local due = KEYS[1]
local now = redis_now()
local taken = redis.call('ZRANGEBYSCORE', due, '-inf', now, 'WITHSCORES', 'LIMIT', 0, tonumber(ARGV[1]))
local reply = {int(now)}
local hold = int(now + tonumber(ARGV[2]))
for i = 1, #taken, 2 do
  redis.call('ZADD', due, hold, taken[i])
  reply[#reply + 1] = taken[i]
  reply[#reply + 1] = taken[i + 1]
end
return reply
