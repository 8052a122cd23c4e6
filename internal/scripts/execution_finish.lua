-- Ends an execution, only for its owner: writes its outcome, moves the job
-- to its next state and releases the lease, all in one step.
-- KEYS[1] job hash   KEYS[2] events   KEYS[3] leases   KEYS[4] ready
-- KEYS[5] scheduled  KEYS[6] fair (fair.lua)     KEYS[7] stats
-- KEYS[8] the job's lane (fair.lua)   KEYS[9..] the lease sets of its concurrency keys
-- ARGV[1] job id     ARGV[2] token
-- ARGV[3] outcome: succeeded | failed | timed_out | cancelled | handed_off
-- ARGV[4] result (JSON, "" for none)   ARGV[5] error (JSON, "" for none)
-- ARGV[6] "1" when a failure may be retried, "0" when it is permanent
-- ARGV[7] backoff_ms before a retry    ARGV[8] retention_ms   ARGV[9] events MAXLEN
-- ARGV[10] traceparent of the execution's span ("" when untraced), kept
-- as exec_trace so the next attempt's span can link to it
-- Returns the job's new state, or "" when the token is not the job's
-- current one or the job is not running: the caller is not the owner, and
-- nothing changed. A retry of a finish that was written (its reply lost)
-- returns the job's state again and changes nothing.
local job, events, leases, ready = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local scheduled, fair, stats = KEYS[5], KEYS[6], KEYS[7]
local id, token, outcome, result, err = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local retryable, backoff, retention, maxlen = ARGV[6] == '1', tonumber(ARGV[7]), ARGV[8], ARGV[9]

local f = redis.call('HMGET', job, 'token', 'state', 'attempt', 'max_attempts', 'cancel_requested', 'priority',
  'exec_state', 'concurrency_keys')
if f[1] == token and f[2] ~= 'running' and f[7] == outcome then
  return f[2] -- a retry whose first run was written (its reply was lost)
end
if f[1] ~= token or f[2] ~= 'running' then
  return ''
end
local attempt, max_attempts, cancel_requested, priority = tonumber(f[3]), tonumber(f[4]), f[5] == '1', tonumber(f[6])

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local function int(x) return string.format('%.0f', x) end

redis.call('ZREM', leases, id)
for i = 9, #KEYS do
  redis.call('ZREM', KEYS[i], id)
end

-- Every field changes in one HSET.
local fields = {'exec_state', outcome, 'exec_finished_at', int(now), 'exec_trace', ARGV[10]}
local function set(...)
  for _, v in ipairs({...}) do
    fields[#fields + 1] = v
  end
end

local next
if outcome == 'succeeded' then
  next = 'succeeded'
  set('result', result, 'error', '')
elseif cancel_requested or outcome == 'cancelled' then
  -- An acknowledged cancel wins over a failure or a hand-off: never retried.
  next = 'cancelled'
  set('error', cjson.encode({code = 'cancelled', message = 'cancelled while running'}))
elseif outcome == 'handed_off' then
  -- A graceful shutdown does not spend the attempt; the job is ready again now.
  next = 'queued'
  attempt = attempt - 1
  set('attempt', attempt)
  fair_push(fair, ready, KEYS[8], f[8], id, priority)
else
  set('error', err)
  if retryable and attempt < max_attempts then
    next = 'retrying'
    redis.call('ZADD', scheduled, int(now + backoff), id)
  else
    next = 'failed'
  end
end

set('state', next)
local terminal = next == 'succeeded' or next == 'failed' or next == 'cancelled'
if terminal then
  set('finished_at', int(now))
end
redis.call('HSET', job, unpack(fields))
redis.call('HINCRBY', stats, 'running', -1)
redis.call('HINCRBY', stats, next, 1)
if terminal then
  redis.call('PEXPIRE', job, retention)
  redis.call('PEXPIRE', events, retention)
end
redis.call('XADD', events, 'MAXLEN', '~', maxlen, '*',
  'type', 'state', 'data', cjson.encode({state = next, attempt = attempt}))
return next
