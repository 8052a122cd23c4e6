-- Sets one key's concurrency limit and budgets together, in place of what
-- it had: a script rather than MULTI, so that an acknowledged write waits
-- for its replicas (internal/replicas sends no WAIT after EXEC). Given the
-- two fields as the caller read them, it is the compare-and-set of a merge
-- computed in Go (job.Store.PatchKeyLimit): a change made since the read is
-- never overwritten.
-- KEYS[1] limits hash   KEYS[2] budgets hash
-- ARGV[1] key   ARGV[2] limit ('' removes it)   ARGV[3] budgets ('' removes them)
-- ARGV[4] limit as read   ARGV[5] budgets as read ('' for none; both left
-- out: write whatever the key holds)
-- Returns how many of the key's two fields it removed, or -1, having
-- written nothing, when a field is no longer as read.
local limits, budgets = KEYS[1], KEYS[2]
local key, limit, budget = ARGV[1], ARGV[2], ARGV[3]
if #ARGV == 5 and ((redis.call('HGET', limits, key) or '') ~= ARGV[4]
    or (redis.call('HGET', budgets, key) or '') ~= ARGV[5]) then
  return -1
end
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
