-- KEYS[1] lease set (member: holder, score: expiry in ms on the Redis clock)
-- Returns the number of live leases, after reaping the expired ones.
local leases = KEYS[1]

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

redis.call('ZREMRANGEBYSCORE', leases, '-inf', now)
return redis.call('ZCARD', leases)
