-- Counts a queue's jobs per state in its stats hash (Load prepends it):
-- field <state> counts every job in that state, and for the states not
-- ended (queued, running, retrying, waiting) field <state>/<tenant> counts each
-- tenant's (a tenant name has no '/'). job.Store reads both: what a tenant
-- sees of its queues, and the cap on its jobs not ended. Ended states are
-- counted for all tenants only: they only grow, and nothing reads them per
-- tenant. Every move (transition.lua) counts itself with count, in a
-- table that settle writes once per script with write_counts.
-- count adds delta to the count of jobs in state, and to tenant's own.
local function count(counts, tenant, state, delta)
  counts[state] = (counts[state] or 0) + delta
  if state == 'queued' or state == 'running' or state == 'retrying' or state == 'waiting' then
    local own = state .. '/' .. tenant
    counts[own] = (counts[own] or 0) + delta
  end
end

-- write_counts adds counts to the stats hash, one HINCRBY per field that
-- changed.
local function write_counts(stats, counts)
  for field, delta in pairs(counts) do
    if delta ~= 0 then
      redis.call('HINCRBY', stats, field, delta)
    end
  end
end

-- unended returns how many of tenant's jobs in the queue of stats have not
-- ended.
local function unended(stats, tenant)
  local n = redis.call('HMGET', stats, 'queued/' .. tenant, 'running/' .. tenant, 'retrying/' .. tenant,
    'waiting/' .. tenant)
  return (tonumber(n[1]) or 0) + (tonumber(n[2]) or 0) + (tonumber(n[3]) or 0) + (tonumber(n[4]) or 0)
end
