-- KEYS[1] lease set (member: holder, score: expiry in ms on the Redis clock)
-- Returns {the number of live leases, ms until the earliest of them
-- expires (0 when there is none)}, after reaping the expired ones.
local leases = KEYS[1]

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

redis.call('ZREMRANGEBYSCORE', leases, '-inf', now)
local earliest = redis.call('ZRANGE', leases, 0, 0, 'WITHSCORES')
return {redis.call('ZCARD', leases), earliest[2] and math.max(1, tonumber(earliest[2]) - now) or 0}
