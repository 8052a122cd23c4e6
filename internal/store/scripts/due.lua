-- A queue's due work on one job, shared by the claim script (for the
-- candidates with due work) and the reap script (the reaper's duties)
-- (Load prepends it, after transition.lua, fair.lua and signal.lua):
--   lease expired    running -> retrying | failed | cancelled (execution lost)
--   max_wait passed  queued | retrying -> expired
--   scheduled due    queued | retrying -> queued (into ready)
--   wait timed out   waiting -> queued (into ready; signal says timed_out)
-- and the deletion of terminal jobs past their retention.
-- Each function takes d, the queue's keys and the script's clock:
-- {leases, scheduled, deadlines, fair, ready, now, backoff (ms before
-- retrying a job whose lease expired), tx (transitions)}.

-- due_read reads job i (its id, job hash, events, lane set and lane name)
-- in one HMGET: what a claim decides on and hands out, and error, the one
-- shown field (transition.lua) the claim's move neither writes nor knows
-- (a job waiting to run has no cancel request: a cancel ends a waiting
-- job, a retry clears it). A job with due work (due) also reads what its
-- moves depend on. The fields are in c.f at the places named below (a
-- table keyed by name would cost a claim a tenth of its work); c.state is
-- false when the job does not exist.
local ATTEMPT, STARTED_AT, MAX_WAIT_MS, KIND, INPUT, TIMEOUT_MS, EXEC_ID = 3, 4, 5, 6, 7, 8, 9
local TRACE, EXEC_TRACE, ERROR, COST, STATES, UNSPENT = 10, 11, 12, 13, 14, 15
local MAX_ATTEMPTS, PRIORITY, CANCEL_REQUESTED = 16, 17, 18
local function due_read(i, id, key, events, set, name, due)
  local f
  if due then
    f = redis.call('HMGET', key, 'state', 'tenant', 'attempt', 'started_at', 'max_wait_ms', 'kind', 'input',
      'timeout_ms', 'exec_id', 'trace', 'exec_trace', 'error', 'cost', 'states', 'unspent',
      'max_attempts', 'priority', 'cancel_requested')
  else
    f = redis.call('HMGET', key, 'state', 'tenant', 'attempt', 'started_at', 'max_wait_ms', 'kind', 'input',
      'timeout_ms', 'exec_id', 'trace', 'exec_trace', 'error', 'cost', 'states', 'unspent')
  end
  if f[1] then -- a field at its usual value is left out (implied, transition.lua)
    f[ATTEMPT], f[STARTED_AT], f[MAX_WAIT_MS] = f[ATTEMPT] or '0', f[STARTED_AT] or '', f[MAX_WAIT_MS] or '0'
    if due then
      f[PRIORITY], f[CANCEL_REQUESTED] = f[PRIORITY] or '0', f[CANCEL_REQUESTED] or '0'
    end
  end
  return {i = i, id = id, key = key, events = events, lane = set, name = name, place = 0, state = f[1],
    tenant = f[2], states = f[STATES], f = f}
end

local function due_fail(code, message)
  return cjson.encode({code = code, message = message})
end

-- due_gone drops what still points at job id, whose record is gone
-- (retention ran out). (Only a terminal job's record is deleted, and those
-- wait in no lane.)
local function due_gone(d, id)
  redis.call('ZREM', d.scheduled, id)
  redis.call('ZREM', d.leases, id)
  redis.call('ZREM', d.deadlines, id)
end

-- due_reap finalises c's execution if its lease expired: the owner is
-- gone. Its job is retried (spending the attempt), or fails on its last
-- attempt, or, when a cancel was acknowledged, is cancelled, never
-- retried. The execution is counted in its tenant's usage as lost. It
-- returns whether the lease had expired.
local function due_reap(d, c)
  local lease = redis.call('ZSCORE', d.leases, c.id)
  if not lease or tonumber(lease) > d.now then
    return false
  end
  redis.call('ZREM', d.leases, c.id)
  if c.state ~= 'running' then
    return true
  end
  local next, err
  if c.f[CANCEL_REQUESTED] == '1' then
    next, err = 'cancelled', due_fail('cancelled', 'cancelled; its worker was lost')
  elseif tonumber(c.f[ATTEMPT]) >= tonumber(c.f[MAX_ATTEMPTS]) then
    next, err = 'failed', due_fail('lease_lost', 'worker lost on the last attempt')
  else
    next, err = 'retrying', due_fail('lease_lost', 'worker lost; retrying')
    redis.call('ZADD', d.scheduled, int(d.now + d.backoff), c.id)
  end
  local tx = d.tx
  local fields = {'error', err, 'exec_state', 'lost', 'exec_finished_at', tx.now_s}
  move(tx, c, next, fields, c.f[ATTEMPT], with(shown_of(c.key), fields))
  use(tx, c.tenant, 'executions_lost')
  return true
end

-- due_expire ends c as expired if it waited past its max_wait without
-- starting; expired gets its lane.
local function due_expire(d, c, expired)
  local deadline = redis.call('ZSCORE', d.deadlines, c.id)
  local state = c.state
  if not deadline or tonumber(deadline) > d.now or (state ~= 'queued' and state ~= 'retrying') then
    return
  end
  fair_remove(d.fair, d.ready, c.lane, c.name, c.id)
  redis.call('ZREM', d.scheduled, c.id)
  redis.call('ZREM', d.deadlines, c.id)
  local fields = {'error', due_fail('max_wait_exceeded', 'waited longer than max_wait without starting')}
  move(d.tx, c, 'expired', fields, c.f[ATTEMPT], with(shown_of(c.key), fields))
  expired[#expired + 1] = c.name
end

-- due_promote makes c ready if its time came (a delay, a retry's backoff,
-- a wait's timeout: then its next execution is told the wait timed out).
-- It returns whether it did.
local function due_promote(d, c)
  local due = redis.call('ZSCORE', d.scheduled, c.id)
  local state = c.state
  if not due or tonumber(due) > d.now or (state ~= 'queued' and state ~= 'retrying' and state ~= 'waiting') then
    return false
  end
  redis.call('ZREM', d.scheduled, c.id)
  fair_push(d.fair, d.ready, c.lane, c.name, c.id, c.f[PRIORITY], d.now)
  if state == 'retrying' then
    move(d.tx, c, 'queued', {}, c.f[ATTEMPT], shown_of(c.key))
  elseif state == 'waiting' then
    local name = redis.call('HGET', c.key, 'wait_for') or ''
    local fields = {'error', due_fail('wait_timeout', 'the wait for signal "' .. name .. '" timed out')}
    resumed(fields, signal_json(name, 'null', true))
    move(d.tx, c, 'queued', fields, c.f[ATTEMPT], with(shown_of(c.key), fields))
  end
  return true
end

-- due_delete_retired deletes ids, terminal jobs found past their retention
-- (checked again here: the finding only read): their record, events,
-- folded key and listing entries, and their charges given back. Job k's
-- keys are KEYS[at + 5(k - 1) ..]: job hash, events, tenant index, folded
-- key and the tenant's retained bytes (stats.lua). It returns how many it
-- deleted.
local function due_delete_retired(d, retired, ids, at)
  if #ids == 0 then
    return 0
  end
  local due_at = redis.call('ZMSCORE', retired, unpack(ids))
  local gone, dead, indexes, charges = {}, {}, {}, {}
  for k = 1, #ids do
    if due_at[k] and tonumber(due_at[k]) <= d.now then
      local base = at + 5 * (k - 1)
      gone[#gone + 1] = ids[k]
      dead[#dead + 1], dead[#dead + 2], dead[#dead + 3] = KEYS[base], KEYS[base + 1], KEYS[base + 3]
      indexes[#indexes + 1], charges[#charges + 1] = KEYS[base + 2], KEYS[base + 4]
    end
  end
  if #gone > 0 then
    forget(retired, gone, dead, indexes, charges)
  end
  return #gone
end
