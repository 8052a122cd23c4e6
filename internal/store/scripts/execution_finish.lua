-- Ends a batch of executions of one queue, each only for its owner: writes
-- its outcome, moves its job to the next state (transition.lua) and
-- releases its execution lease, all in one step. (The caller releases the slots of its
-- concurrency keys, which live in the keys' own slots.)
-- KEYS[1] leases   KEYS[2] ready   KEYS[3] scheduled   KEYS[4] fair (fair.lua)
-- KEYS[5] stats (stats.lua, finished.lua)   KEYS[6] retired
-- KEYS[4 + 3i] job hash, KEYS[5 + 3i] events and KEYS[6 + 3i] lane
-- (fair.lua) of execution i (1..n)
-- KEYS[#KEYS - 1] the usage day each execution's end is counted in
-- (stats.lua)   KEYS[#KEYS], the last, the webhook outbox (transition.lua)
-- ARGV[1] retention_ms (of a job that turns terminal)   ARGV[2] events MAXLEN
-- ARGV[3] n, the executions   ARGV[4] when the usage day's counts are
-- dropped (unix ms; "" = not counted)
-- then for each execution: job id, token, attempt (the job's, set by the
--   claim that issued the token),
--   outcome (succeeded | failed | timed_out | cancelled | handed_off |
--   pushback: the upstream refused it for capacity | waiting: the handler
--   waits for a signal),
--   result (JSON, "" for none), error (JSON, "" for none),
--   "1" when a failure may be retried ("0" when it is permanent),
--   backoff_ms before a retry (for a pushback: the upstream's Retry-After,
--   0 when it gave none), the traceparent of the execution's span ("" when
--   untraced; kept as exec_trace so the next attempt's span can link to it),
--   execution id, the signal a wait waits for ("" unless waiting) and the
--   wait's timeout_ms
-- Returns, for each execution, its job's new state, or "" when the token or
-- the execution id is not the job's current one or the job is not running
-- (two executions never both finish, even with equal tokens): the caller is not
-- the owner, and nothing of that execution changed. A retry of a finish
-- that was written (its reply lost) returns the job's state again and
-- changes nothing.
--
-- A hand-off spends no attempt: the job is queued again at once, on the
-- same attempt (unspent: its next execution runs on it again, so attempt
-- numbers never go back).
--
-- A pushback spends no attempt (as a hand-off): the job waits in retrying
-- for the Retry-After, or for a backoff that doubles with each pushback in
-- a row from 250 ms to 30 s; the 50th in a row fails it (upstream_limited).
-- Any other end of an execution ends the row.
--
-- A wait spends no attempt either. The job becomes waiting, in the
-- scheduled set until its timeout (the claim's due work resumes it then);
-- or, when a signal of that name was sent before (kept as sig:<name>), it
-- takes the signal and is queued at once: a signal is never lost to the
-- moment between the handler's decision and this step. The execution's
-- lease ends here and the caller releases its slots as for any end, so a
-- waiting job holds none.
local leases, ready, scheduled, fair, stats, retired = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local retention, maxlen, n = ARGV[1], ARGV[2], tonumber(ARGV[3])

local max_pushbacks = 50

local tx = transitions(stats, retired, redis_now(), retention, maxlen, KEYS[#KEYS])
use_day(tx, KEYS[#KEYS - 1], ARGV[4])

-- released holds the ids whose leases end: removed once per batch.
local out, released = {}, {}

local at = 4
for i = 1, n do
  local id, token, attempt, outcome = ARGV[at + 1], ARGV[at + 2], ARGV[at + 3], ARGV[at + 4]
  local result, err, retryable, backoff = ARGV[at + 5], ARGV[at + 6], ARGV[at + 7] == '1', ARGV[at + 8]
  local trace, exec, wait_for, wait_ms = ARGV[at + 9], ARGV[at + 10], ARGV[at + 11], ARGV[at + 12]
  at = at + 12

  -- What the owner's check and the cancel a success yields to depend on,
  -- then the shown fields (transition.lua's shown_names) the move neither
  -- writes nor knows (the owner's attempt is the job's and its execution's: the claim
  -- wrote all three). A failure or a hand-off reads what its next state
  -- depends on below.
  local job = KEYS[4 + 3 * i]
  local f = redis.call('HMGET', job, 'state', 'token', 'exec_state', 'cancel_requested', 'tenant',
    'started_at', 'exec_id', 'exec_worker', 'exec_started_at', 'exec_heartbeat_at', 'pushbacks', 'webhook',
    'webhook_id', 'states')
  local state, cancel_requested = f[1], f[4] or '0' -- implied when absent (transition.lua)
  local owner = f[2] == token and f[7] == exec
  if owner and state ~= 'running' and f[3] == outcome then
    out[i] = state -- a retry whose first run was written (its reply was lost)
  elseif not owner or state ~= 'running' then
    out[i] = ''
  else
    released[#released + 1] = id

    -- Every field changes in the move's one HSET.
    local fields = {'exec_state', outcome, 'exec_finished_at', tx.now_s, 'exec_trace', trace}
    local next, checkpoint
    if outcome == 'succeeded' and cancel_requested ~= '1' then
      next, err = 'succeeded', ''
      fields[#fields + 1], fields[#fields + 2] = 'result', result
    elseif cancel_requested == '1' or outcome == 'cancelled' then
      -- An acknowledged cancel wins over a success, a failure or a
      -- hand-off: never retried.
      next, err = 'cancelled', '{"code":"cancelled","message":"cancelled while running"}'
    elseif outcome == 'handed_off' then
      -- A graceful shutdown does not spend the attempt; the job is ready
      -- again now, with the error of its last attempt.
      next = 'queued'
      fields[#fields + 1], fields[#fields + 2] = 'unspent', '1'
      local g = redis.call('HMGET', job, 'priority', 'concurrency_keys', 'error', 'kind')
      err = g[3] or '' -- "" for a record older than the field, as the claim reads it
      fair_push(fair, ready, KEYS[6 + 3 * i], fair_lane(g[4], g[2]), id, tonumber(g[1] or '0'), tx.now)
    elseif outcome == 'waiting' then
      fields[#fields + 1], fields[#fields + 2] = 'unspent', '1'
      local sig = 'sig:' .. wait_for
      local g = redis.call('HMGET', job, 'priority', 'concurrency_keys', 'error', sig, 'signals_pending', 'signals_bytes',
        'kind', 'checkpoint')
      err = g[3] or ''
      if g[4] then
        next = 'queued'
        redis.call('HDEL', job, sig)
        signal_take(fields, g[5], g[6], #g[4])
        fields[#fields + 1], fields[#fields + 2] = 'signal', signal_json(wait_for, g[4], false)
        fair_push(fair, ready, KEYS[6 + 3 * i], fair_lane(g[7], g[2]), id, tonumber(g[1] or '0'), tx.now)
      else
        next, checkpoint = 'waiting', g[8] or ''
        local untl = int(tx.now + tonumber(wait_ms))
        fields[#fields + 1], fields[#fields + 2] = 'wait_for', wait_for
        fields[#fields + 1], fields[#fields + 2] = 'wait_until', untl
        redis.call('ZADD', scheduled, untl, id)
      end
    elseif outcome == 'pushback' then
      local row = (tonumber(f[11]) or 0) + 1
      fields[#fields + 1], fields[#fields + 2] = 'pushbacks', row
      if row >= max_pushbacks then
        next = 'failed'
        err = cjson.encode({code = 'upstream_limited', message = 'the upstream refused ' .. row ..
          ' times in a row for capacity'})
      else
        next = 'retrying'
        fields[#fields + 1], fields[#fields + 2] = 'unspent', '1'
        local wait = tonumber(backoff)
        if wait <= 0 then wait = math.min(250 * 2 ^ (row - 1), 30000) end
        redis.call('ZADD', scheduled, int(tx.now + wait), id)
      end
    elseif retryable and tonumber(attempt) < tonumber(redis.call('HGET', job, 'max_attempts')) then
      next = 'retrying'
      redis.call('ZADD', scheduled, int(tx.now + tonumber(backoff)), id)
    else
      next = 'failed'
    end
    if next ~= 'queued' and outcome ~= 'waiting' then
      fields[#fields + 1], fields[#fields + 2] = 'error', err
    end
    if f[11] and f[11] ~= '0' and outcome ~= 'pushback' then
      fields[#fields + 1], fields[#fields + 2] = 'pushbacks', '0' -- the row ends
    end
    move(tx, {key = job, events = KEYS[5 + 3 * i], id = id, tenant = f[5], state = state, webhook = {f[12], f[13]},
      states = f[14], checkpoint = checkpoint},
      next, fields, attempt,
      {f[6], cancel_requested, err, token, f[7], f[8], attempt, f[9], f[10], tx.now_s})
    use(tx, f[5], 'executions_' .. outcome)
    out[i] = next
  end
end

if #released > 0 then
  redis.call('ZREM', leases, unpack(released))
end
settle(tx)
return out
