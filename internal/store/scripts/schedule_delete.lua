-- Deletes a schedule: its record, and its entries in the tenant's due
-- index and names. (The index of tenants may still name the tenant: the
-- next take finds nothing due and moves it on.)
-- KEYS[1] the schedule's record   KEYS[2] the tenant's due index
-- KEYS[3] the tenant's names
-- ARGV[1] name
-- Returns 1 when it existed, 0 when not.
local n = redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
return n
