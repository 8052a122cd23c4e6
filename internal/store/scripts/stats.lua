-- Counts a queue's jobs per state in its stats hash (Load prepends it):
-- for the states not ended (queued, running, retrying, waiting), field
-- <state>/<tenant> counts each tenant's jobs (a tenant name has no '/').
-- job.Store reads them: what a tenant sees of its queues, the cap on its
-- jobs not ended, their sums for all tenants, and which tenants an admin's
-- listing reads (a tenant's fields stay when they count 0). The jobs that
-- ended are counted per minute only (finished.lua). Versions before issue
-- 23's waypoint (docs/operations.md) also counted every state for all
-- tenants, in field <state>: nothing reads those fields now, and leaving
-- them out spares a move two HINCRBYs. Every move (transition.lua) counts
-- itself with count, in tables that settle writes once per script.

-- count adds delta to tx's count of tenant's jobs in state; one that ended
-- goes to the count of the ended (delta > 0: a retry takes one out of an
-- ended state, which no count holds).
local function count(tx, tenant, state, delta)
  if state == 'queued' or state == 'running' or state == 'retrying' or state == 'waiting' then
    local own = state .. '/' .. tenant
    tx.counts[own] = (tx.counts[own] or 0) + delta
  elseif delta > 0 then
    tx.ended[state] = (tx.ended[state] or 0) + delta
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

-- A queue's usage: each tenant's jobs created and executions started and
-- ended (ratelimit/usage's lifecycle counters), counted per UTC day in
-- the hash {q:Q}:usage:<date>, field <counter>/<tenant>, which GET
-- /v1/usage adds to the tenant's other counts (job.Store.AddUsage). Each
-- is counted by the move that makes it happen, in the same step: exactly
-- once, with no mark of the event. The caller names the day and when its
-- counts are dropped (use_day); a script not given one counts nothing.

-- use_day makes the moves of tx count usage in the day hash key, whose
-- counts are dropped at drop_at (unix ms; "" counts nothing).
local function use_day(tx, key, drop_at)
  if drop_at ~= '' then
    tx.usage, tx.drop_at = key, drop_at
  end
end

-- use counts n events (1 when nil) of tenant's counter in tx's day
-- (written by settle).
local function use(tx, tenant, counter, n)
  if tx.usage then
    local field = counter .. '/' .. tenant
    tx.used[field] = (tx.used[field] or 0) + (n or 1)
  end
end

-- write_usage adds tx's usage to its day, one HINCRBY per counter and
-- tenant; the first count of a field sets the day's drop time (the same
-- for every field: so a day written again, or by an older version's
-- script, keeps it).
local function write_usage(tx)
  for field, n in pairs(tx.used) do
    if redis.call('HINCRBY', tx.usage, field, n) == n then
      redis.call('PEXPIREAT', tx.usage, tx.drop_at)
    end
  end
end

-- A tenant's retained bytes in a queue: what its jobs cost Redis from
-- their submit until forget (transition.lua) deletes them, the quota
-- LEASEHOLD_TENANT_MAX_RETAINED_BYTES bounds. The hash
-- {q:Q}:retained:<tenant> holds each job's charge (field: its id) and
-- their sum (field '*', which no id is). A job is charged once, at its
-- submit, and given back exactly that when it is deleted: a fold or a
-- pack shrinks what it holds, not its charge, and a job with no charge
-- gives nothing back. So the sum never drifts below 0 nor keeps a deleted
-- job's bytes.

-- retained_bytes returns the sum of the charges in retained.
local function retained_bytes(retained)
  return tonumber(redis.call('HGET', retained, '*') or '0')
end

-- charge charges the jobs of charges (a flat list: id, bytes, ...), whose
-- sum is total, to retained.
local function charge(retained, charges, total)
  redis.call('HSET', retained, unpack(charges))
  redis.call('HINCRBY', retained, '*', total)
end

-- give_back gives back the charge of job id to retained, once: the hash
-- goes when its last job does.
local function give_back(retained, id)
  local c = redis.call('HGET', retained, id)
  if not c then
    return
  end
  redis.call('HDEL', retained, id)
  if redis.call('HINCRBY', retained, '*', -tonumber(c)) <= 0 and redis.call('HLEN', retained) <= 1 then
    redis.call('DEL', retained)
  end
end
