-- Deletes a schedule: its record, and its entries in the due index and the
-- tenant's names.
-- KEYS[1] the schedule's record   KEYS[2] due index   KEYS[3] the tenant's names
-- ARGV[1] due member   ARGV[2] name
-- Returns 1 when it existed, 0 when not.
local n = redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[2])
return n
