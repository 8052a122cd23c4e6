-- Ends a batch of executions of one queue, each only for its owner: writes
-- its outcome, moves its job to the next state and releases its execution
-- lease, all in one step. (The caller releases the slots of its
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

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local function int(x) return string.format('%.0f', x) end
-- Formatted once: each number turned into a string costs a sprintf.
local now_s, retire_at = int(now), int(now + tonumber(retention))

-- released holds the ids whose leases end: removed once per batch.
local out, released, counts, retiring = {}, {}, {}, {}

local at = 3
for i = 1, n do
  local job, events, lane = KEYS[4 + 3 * i], KEYS[5 + 3 * i], KEYS[6 + 3 * i]
  local id, token, attempt_s, outcome = ARGV[at + 1], ARGV[at + 2], ARGV[at + 3], ARGV[at + 4]
  local result, err, retryable, backoff = ARGV[at + 5], ARGV[at + 6], ARGV[at + 7] == '1', ARGV[at + 8]
  local trace = ARGV[at + 9]
  at = at + 9

  -- Only the owner's check (and the cancel a success yields to) is read
  -- here; a failure reads what its next state depends on below.
  local f = redis.call('HMGET', job, 'token', 'state', 'exec_state', 'cancel_requested', 'tenant')
  if f[1] == token and f[2] ~= 'running' and f[3] == outcome then
    out[i] = f[2] -- a retry whose first run was written (its reply was lost)
  elseif f[1] ~= token or f[2] ~= 'running' then
    out[i] = ''
  else
    released[#released + 1] = id

    -- Every field changes in one HSET.
    local fields = {'exec_state', outcome, 'exec_finished_at', now_s, 'exec_trace', trace}
    local next
    if outcome == 'succeeded' and f[4] ~= '1' then
      next = 'succeeded'
      fields[#fields + 1], fields[#fields + 2] = 'result', result
      fields[#fields + 1], fields[#fields + 2] = 'error', ''
    else
      local g = redis.call('HMGET', job, 'cancel_requested', 'max_attempts', 'priority', 'concurrency_keys')
      local attempt = tonumber(attempt_s)
      if g[1] == '1' or outcome == 'cancelled' then
        -- An acknowledged cancel wins over a success, a failure or a
        -- hand-off: never retried.
        next = 'cancelled'
        fields[#fields + 1], fields[#fields + 2] = 'error', '{"code":"cancelled","message":"cancelled while running"}'
      elseif outcome == 'handed_off' then
        -- A graceful shutdown does not spend the attempt; the job is ready again now.
        next = 'queued'
        attempt_s = tostring(attempt - 1)
        fields[#fields + 1], fields[#fields + 2] = 'attempt', attempt_s
        fair_push(fair, ready, lane, g[4], id, tonumber(g[3]))
      else
        fields[#fields + 1], fields[#fields + 2] = 'error', err
        if retryable and attempt < tonumber(g[2]) then
          next = 'retrying'
          redis.call('ZADD', scheduled, int(now + tonumber(backoff)), id)
        else
          next = 'failed'
        end
      end
    end

    fields[#fields + 1], fields[#fields + 2] = 'state', next
    local terminal = next == 'succeeded' or next == 'failed' or next == 'cancelled'
    if terminal then
      fields[#fields + 1], fields[#fields + 2] = 'finished_at', now_s
    end
    redis.call('HSET', job, unpack(fields))
    count(counts, f[5], next, 1)
    count(counts, f[5], 'running', -1)
    if terminal then
      retiring[#retiring + 1] = retire_at
      retiring[#retiring + 1] = id
    end
    redis.call('XADD', events, 'MAXLEN', '~', maxlen, '*',
      'type', 'state', 'data', '{"state":"' .. next .. '","attempt":' .. attempt_s .. '}')
    out[i] = next
  end
end

if #released > 0 then
  redis.call('ZREM', leases, unpack(released))
end
write_counts(stats, counts)
for state, delta in pairs(counts) do
  count_finished(stats, now, state, delta) -- the ended states only
end
if #retiring > 0 then
  redis.call('ZADD', retired, unpack(retiring))
end
return out
