-- Puts ended jobs of one queue back in it: each failed, cancelled or expired
-- job becomes queued again, with its id, events and last execution kept.
-- KEYS[1] ready   KEYS[2] fair (fair.lua)   KEYS[3] stats (stats.lua)   KEYS[4] retired
-- KEYS[5] deadlines
-- KEYS[3 + 3i] job hash, KEYS[4 + 3i] events and KEYS[5 + 3i] lane
-- (fair.lua) of job i (1..n)
-- ARGV[1] tenant of the caller ("" = admin, any tenant)
-- ARGV[2] events stream MAXLEN   ARGV[3] "1" to return each job's record
-- ARGV[4 .. 3+n] the job ids
-- Returns, for each job, {outcome} or, with ARGV[3] "1", {outcome, HGETALL
-- of the job}: outcome is 'retried' when it moved (it is queued now),
-- 'missing' when there is no such job for this caller, else the state it
-- stays in (not ended, or succeeded: nothing moved).
--
-- A retried job starts afresh: attempt 0 (max_attempts more attempts),
-- no cancel request, no finished_at, its max_wait counting again from now.
-- Its token stays: the next claim issues a higher one from the queue's
-- fence. Its error stays too, as on any job waiting for another attempt.
local ready, fair, stats, retired, deadlines = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local tenant, maxlen, records = ARGV[1], ARGV[2], ARGV[3] == '1'

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local out, counts = {}, {}
for i = 1, #ARGV - 3 do
  local id = ARGV[3 + i]
  local job, events, lane = KEYS[3 + 3 * i], KEYS[4 + 3 * i], KEYS[5 + 3 * i]
  local f = redis.call('HMGET', job, 'tenant', 'state', 'concurrency_keys', 'priority', 'max_wait_ms')
  local owner, state = f[1], f[2]
  local outcome
  if not state or (tenant ~= '' and owner ~= tenant) then
    -- Another tenant's job is as absent as one that never existed.
    outcome = 'missing'
  elseif state == 'failed' or state == 'cancelled' or state == 'expired' then
    redis.call('HSET', job, 'state', 'queued', 'attempt', '0', 'cancel_requested', '0', 'finished_at', '')
    redis.call('ZREM', retired, id)
    fair_push(fair, ready, lane, f[3], id, f[4])
    if tonumber(f[5]) > 0 then
      redis.call('ZADD', deadlines, string.format('%.0f', now + tonumber(f[5])), id)
    end
    count(counts, owner, state, -1)
    count(counts, owner, 'queued', 1)
    redis.call('XADD', events, 'MAXLEN', '~', maxlen, '*',
      'type', 'state', 'data', cjson.encode({state = 'queued', attempt = 0}))
    outcome = 'retried'
  else
    outcome = state
  end
  if records and outcome ~= 'missing' then
    out[i] = {outcome, redis.call('HGETALL', job)}
  else
    out[i] = {outcome}
  end
end
write_counts(stats, counts)
return out
