-- Ends a batch of executions of one queue, each only for its owner: writes
-- its outcome, moves its job to the next state (transition.lua) and
-- releases its execution lease, all in one step. (The caller releases the slots of its
-- concurrency keys, which live in the keys' own slots.)
-- KEYS[1] leases   KEYS[2] ready   KEYS[3] scheduled   KEYS[4] fair (fair.lua)
-- KEYS[5] stats (stats.lua, finished.lua)   KEYS[6] retired
-- KEYS[4 + 3i] job hash, KEYS[5 + 3i] events and KEYS[6 + 3i] lane
-- (fair.lua) of execution i (1..n)
-- ARGV[1] retention_ms (of a job that turns terminal)   ARGV[2] events MAXLEN
-- ARGV[3] n, the executions
-- then for each execution: job id, token, attempt (the job's, set by the
--   claim that issued the token),
--   outcome (succeeded | failed | timed_out | cancelled | handed_off),
--   result (JSON, "" for none), error (JSON, "" for none),
--   "1" when a failure may be retried ("0" when it is permanent),
--   backoff_ms before a retry, the traceparent of the execution's span ("" when
--   untraced; kept as exec_trace so the next attempt's span can link to it)
-- Returns, for each execution, its job's new state, or "" when the token is
-- not the job's current one or the job is not running: the caller is not
-- the owner, and nothing of that execution changed. A retry of a finish
-- that was written (its reply lost) returns the job's state again and
-- changes nothing.
local leases, ready, scheduled, fair, stats, retired = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local retention, maxlen, n = ARGV[1], ARGV[2], tonumber(ARGV[3])

local tx = transitions(stats, retired, redis_now(), retention, maxlen)
-- What the owner's check and the cancel a success yields to depend on,
-- and the SHOWN fields (transition.lua) the move does not write: one read.
-- A failure or a hand-off reads what its next state depends on below, and
-- a hand-off the error it keeps (every other move writes one). A running
-- job's exec_attempt is its attempt: the claim writes both.
local read = job_reader({'token', 'exec_state', 'cancel_requested', 'started_at', 'exec_id',
  'exec_worker', 'exec_started_at', 'exec_heartbeat_at'})

-- released holds the ids whose leases end: removed once per batch.
local out, released = {}, {}

local at = 3
for i = 1, n do
  local id, token, attempt_s, outcome = ARGV[at + 1], ARGV[at + 2], ARGV[at + 3], ARGV[at + 4]
  local result, err, retryable, backoff = ARGV[at + 5], ARGV[at + 6], ARGV[at + 7] == '1', ARGV[at + 8]
  local trace = ARGV[at + 9]
  at = at + 9

  local j = read(KEYS[4 + 3 * i], KEYS[5 + 3 * i], id)
  local f = j.f
  if f.token == token and f.state ~= 'running' and f.exec_state == outcome then
    out[i] = f.state -- a retry whose first run was written (its reply was lost)
  elseif f.token ~= token or f.state ~= 'running' then
    out[i] = ''
  else
    released[#released + 1] = id
    f.exec_attempt = f.attempt

    -- Every field changes in the move's one HSET.
    local fields = {'exec_state', outcome, 'exec_finished_at', tx.now_s, 'exec_trace', trace}
    local next
    if outcome == 'succeeded' and f.cancel_requested ~= '1' then
      next = 'succeeded'
      fields[#fields + 1], fields[#fields + 2] = 'result', result
      fields[#fields + 1], fields[#fields + 2] = 'error', ''
    elseif f.cancel_requested == '1' or outcome == 'cancelled' then
      -- An acknowledged cancel wins over a success, a failure or a
      -- hand-off: never retried.
      next = 'cancelled'
      fields[#fields + 1], fields[#fields + 2] = 'error', '{"code":"cancelled","message":"cancelled while running"}'
    elseif outcome == 'handed_off' then
      -- A graceful shutdown does not spend the attempt; the job is ready again now.
      next = 'queued'
      fields[#fields + 1], fields[#fields + 2] = 'attempt', tostring(tonumber(attempt_s) - 1)
      local g = redis.call('HMGET', j.key, 'priority', 'concurrency_keys', 'error')
      f.error = g[3]
      fair_push(fair, ready, KEYS[6 + 3 * i], g[2], id, tonumber(g[1]))
    else
      fields[#fields + 1], fields[#fields + 2] = 'error', err
      if retryable and tonumber(attempt_s) < tonumber(redis.call('HGET', j.key, 'max_attempts')) then
        next = 'retrying'
        redis.call('ZADD', scheduled, int(tx.now + tonumber(backoff)), id)
      else
        next = 'failed'
      end
    end
    move(tx, j, next, fields)
    out[i] = next
  end
end

if #released > 0 then
  redis.call('ZREM', leases, unpack(released))
end
settle(tx)
return out
