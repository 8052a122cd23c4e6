-- Puts ended jobs of one queue back in it: each failed, cancelled or expired
-- job moves to queued (transition.lua), with its id, events and last
-- execution kept.
-- KEYS[1] ready   KEYS[2] fair (fair.lua)   KEYS[3] stats (stats.lua)   KEYS[4] retired
-- KEYS[5] deadlines
-- KEYS[2 + 4i] job hash, KEYS[3 + 4i] events, KEYS[4 + 4i] lane (fair.lua)
-- and KEYS[5 + 4i] folded key (transition.lua's fold) of job i (1..n)
-- ARGV[1] tenant of the caller ("" = admin, any tenant)
-- ARGV[2] events stream MAXLEN   ARGV[3] "1" to return each job's record
-- ARGV[4] how many of the tenant's jobs not ended this queue may hold ("" =
-- no cap; only with a tenant)   ARGV[5 .. 4+n] the job ids
-- (retryCall in internal/store/job_calls.go is the one place in Go that lays these KEYS and
-- ARGV out: change the two together.)
-- Fails with unpack_first's reply (transition.lua) when a job is packed.
-- Returns, for each job, {outcome} or, with ARGV[3] "1", {outcome, the
-- job's record (record, transition.lua)}: outcome is 'retried' when it moved (it is queued now),
-- 'missing' when there is no such job for this caller, 'capped' when it
-- would have moved but the queue holds as many of the tenant's jobs not
-- ended as ARGV[4] (then {'capped', that count}), else the state it stays
-- in (not ended, or succeeded: nothing moved).
--
-- A retry counts like a submission (job_submit.lua): the cap is checked
-- here, with the moves, so concurrent retries and submissions to the queue
-- never pass it.
--
-- A retried job keeps its attempt number, so its next execution is the
-- attempt after its last one, even one that spent none (unspent is
-- dropped): attempt numbers never go back. It gets its original
-- max_attempts more: max_attempts becomes attempt + the original. The original is the one before the first retry;
-- retries keeps, per retry, its state event's id and the max_attempts
-- before it ("<event id>:<n>,..."), so that a replay shows each event's
-- max_attempts as it was (job.Job.At). No cancel request, no finished_at,
-- its max_wait counting again from now. Its token stays: the next claim
-- issues a higher one from the queue's fence. Its error stays too, as on
-- any job waiting for another attempt.
local ready, fair, stats, retired, deadlines = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local tenant, maxlen, records, room = ARGV[1], ARGV[2], ARGV[3] == '1', tonumber(ARGV[4])

local now = redis_now()
local tx = transitions(stats, retired, now, nil, maxlen)
local held = room and unended(stats, tenant) -- the tenant's jobs not ended, moved ones included

-- Packed jobs are unpacked first, before anything here is written.
local packed_at = {}
for i = 1, #ARGV - 4 do
  if packed_for(KEYS[5 + 4 * i], tenant) and redis.call('EXISTS', KEYS[2 + 4 * i]) == 0 then
    packed_at[#packed_at + 1], packed_at[#packed_at + 2] = 2 + 4 * i, 5 + 4 * i
  end
end
if #packed_at > 0 then
  return unpack_first(packed_at)
end

local out = {}
for i = 1, #ARGV - 4 do
  local id = ARGV[4 + i]
  local key, folded = KEYS[2 + 4 * i], KEYS[5 + 4 * i]
  local f = redis.call('HMGET', key, 'state', 'tenant')
  local state = f[1]
  local outcome
  local ended = state == 'failed' or state == 'cancelled' or state == 'expired'
  if not state or (tenant ~= '' and f[2] ~= tenant) then
    -- Another tenant's job is as absent as one that never existed.
    outcome = 'missing'
  elseif ended and held and held >= room then
    outcome = 'capped'
  elseif ended then
    local j = {key = key, events = KEYS[3 + 4 * i], folded = folded, id = id, tenant = f[2], state = state}
    -- The move expands it too, but only after this reads what the move
    -- is made of: retries, and the shown error, may be folded.
    expand(j)
    f = redis.call('HMGET', key, 'state', 'tenant', 'concurrency_keys', 'priority', 'max_wait_ms', 'attempt',
      'max_attempts', 'retries', 'pushbacks', 'states', 'unspent', 'kind')
    -- priority, max_wait_ms and attempt, implied when absent (transition.lua)
    f[4], f[5], f[6] = f[4] or '0', f[5] or '0', f[6] or '0'
    j.states = f[10]
    local retries = f[8] or ''
    local original = retries:match('^[^:]*:(%d+)') or f[7]
    local fields = {'max_attempts', int(tonumber(f[6]) + tonumber(original)), 'cancel_requested', '0'}
    if f[9] and f[9] ~= '0' then
      fields[#fields + 1], fields[#fields + 2] = 'pushbacks', '0' -- a fresh row of pushbacks
    end
    if f[11] then
      redis.call('HDEL', key, 'unspent')
    end
    local event = move(tx, j, 'queued', fields, f[6], with(shown_of(key), fields))
    if retries ~= '' then
      retries = retries .. ','
    end
    redis.call('HSET', key, 'retries', retries .. event .. ':' .. f[7])
    fair_push(fair, ready, KEYS[4 + 4 * i], fair_lane(f[12], f[3]), id, f[4], tx.now)
    if tonumber(f[5]) > 0 then
      redis.call('ZADD', deadlines, int(now + tonumber(f[5])), id)
    end
    outcome = 'retried'
    if held then
      held = held + 1
    end
  else
    outcome = state
  end
  if outcome == 'capped' then
    out[i] = {outcome, held}
  elseif records and outcome ~= 'missing' then
    out[i] = {outcome, record(key, folded)}
  else
    out[i] = {outcome}
  end
end
settle(tx)
return out
