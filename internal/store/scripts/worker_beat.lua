-- Writes a worker's entry in the registry of live workers, with its
-- heartbeat, for ttl_ms: a worker that stops renewing it drops out.
-- KEYS[1] the registry (sorted set: worker id -> when its entry expires)
-- KEYS[2] the worker's entry (hash)
-- ARGV[1] worker id   ARGV[2] ttl_ms   ARGV[3 ..] the entry's fields and
-- values, in pairs
-- Returns the Redis clock in ms, which the entry holds as heartbeat_at.
local registry, entry = KEYS[1], KEYS[2]
local id, ttl = ARGV[1], tonumber(ARGV[2])

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

redis.call('DEL', entry)
redis.call('HSET', entry, 'heartbeat_at', string.format('%d', now), unpack(ARGV, 3))
redis.call('PEXPIRE', entry, ttl)
redis.call('ZADD', registry, string.format('%d', now + ttl), id)
-- Entries of workers gone leave the set here; the set itself lives as
-- long as its longest-lived entry.
redis.call('ZREMRANGEBYSCORE', registry, '-inf', string.format('(%d', now))
if redis.call('PTTL', registry) < ttl then
  redis.call('PEXPIRE', registry, ttl)
end
return now
