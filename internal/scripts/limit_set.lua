-- Sets one key's concurrency limit and budgets together, in place of what
-- it had: a script rather than MULTI, so that an acknowledged write waits
-- for its replicas (internal/replicas sends no WAIT after EXEC).
-- KEYS[1] limits hash   KEYS[2] budgets hash
-- ARGV[1] key   ARGV[2] limit ('' removes it)   ARGV[3] budgets ('' removes them)
-- Returns how many of the key's two fields it removed.
local limits, budgets = KEYS[1], KEYS[2]
local key, limit, budget = ARGV[1], ARGV[2], ARGV[3]
local removed = 0
if limit == '' then
  removed = removed + redis.call('HDEL', limits, key)
else
  redis.call('HSET', limits, key, limit)
end
if budget == '' then
  removed = removed + redis.call('HDEL', budgets, key)
else
  redis.call('HSET', budgets, key, budget)
end
return removed
