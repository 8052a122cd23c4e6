-- Releases a lock taken with SET key token NX PX ttl, if it is still the
-- caller's: a lock that expired and was taken by another is left alone.
-- KEYS[1] lock   ARGV[1] the caller's token
-- Returns 1 when released, 0 when the lock was not the caller's.
local lock, token = KEYS[1], ARGV[1]
if redis.call('GET', lock) == token then
  return redis.call('DEL', lock)
end
return 0
