-- Does a queue's due work for the candidates the peek script found, then
-- claims up to `want` ready jobs for one worker. Every candidate is checked
-- again here: a candidate another worker took since the peek is skipped.
-- KEYS[1] ready   KEYS[2] scheduled   KEYS[3] leases   KEYS[4] deadlines
-- KEYS[5] fence   KEYS[6] seq         KEYS[7] stats
-- KEYS[8 + 2(i-1)] job hash and KEYS[9 + 2(i-1)] events of candidate i
-- ARGV[1] want    ARGV[2] lease ttl_ms      ARGV[3] worker id
-- ARGV[4] retention_ms (of a job that turns terminal)   ARGV[5] events MAXLEN
-- ARGV[6] backoff_ms before retrying a job whose lease expired
-- ARGV[7] n, the number of candidates   ARGV[8 .. 7+n] candidate job ids
-- ARGV[8+n .. 7+n+want] execution ids for the jobs claimed, in order
-- Returns, for each job claimed, 7 values:
-- {id, execution id, token, attempt, kind, input, timeout_ms}.
--
-- Due work, for each candidate:
--   lease expired    running -> retrying | failed | cancelled (execution lost)
--   max_wait passed  queued | retrying -> expired
--   scheduled due    queued | retrying -> queued (into ready)
local ready, scheduled, leases, deadlines = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local fence, seq, stats = KEYS[5], KEYS[6], KEYS[7]
local want, ttl, worker = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3]
local retention, maxlen, backoff = ARGV[4], ARGV[5], tonumber(ARGV[6])
local n = tonumber(ARGV[7])

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

-- Lua numbers would reach Redis as 14 significant digits: format integers.
local function int(x) return string.format('%.0f', x) end

local function event(events, state, attempt)
  redis.call('XADD', events, 'MAXLEN', '~', maxlen, '*',
    'type', 'state', 'data', cjson.encode({state = state, attempt = tonumber(attempt)}))
end

local function move(job, from, to)
  redis.call('HSET', job, 'state', to)
  redis.call('HINCRBY', stats, from, -1)
  redis.call('HINCRBY', stats, to, 1)
end

local function finish(job, events)
  redis.call('HSET', job, 'finished_at', int(now))
  redis.call('PEXPIRE', job, retention)
  redis.call('PEXPIRE', events, retention)
end

local function fail(code, message)
  return cjson.encode({code = code, message = message})
end

-- Higher priority first, then FIFO (see job_submit.lua).
local function enqueue(id, priority)
  redis.call('ZADD', ready, int((100 - tonumber(priority)) * 8796093022208 + redis.call('INCR', seq)), id)
end

local claimable = {}
for i = 1, n do
  local id = ARGV[7 + i]
  local job, events = KEYS[6 + 2 * i], KEYS[7 + 2 * i]
  local f = redis.call('HMGET', job, 'state', 'attempt', 'max_attempts', 'cancel_requested', 'priority')
  local state, attempt, max_attempts, cancel_requested, priority = f[1], f[2], f[3], f[4], f[5]

  if not state then
    -- The record is gone (retention ran out): drop what still points at it.
    redis.call('ZREM', ready, id)
    redis.call('ZREM', scheduled, id)
    redis.call('ZREM', leases, id)
    redis.call('ZREM', deadlines, id)
  else
    local lease = redis.call('ZSCORE', leases, id)
    if lease and tonumber(lease) <= now then
      redis.call('ZREM', leases, id)
      if state == 'running' then
        -- The owner is gone. An acknowledged cancel is honoured, never retried.
        redis.call('HSET', job, 'exec_state', 'lost', 'exec_finished_at', int(now))
        if cancel_requested == '1' then
          redis.call('HSET', job, 'error', fail('cancelled', 'cancelled; its worker was lost'))
          move(job, state, 'cancelled')
          finish(job, events)
          state = 'cancelled'
        elseif tonumber(attempt) >= tonumber(max_attempts) then
          redis.call('HSET', job, 'error', fail('lease_lost', 'worker lost on the last attempt'))
          move(job, state, 'failed')
          finish(job, events)
          state = 'failed'
        else
          redis.call('HSET', job, 'error', fail('lease_lost', 'worker lost; retrying'))
          redis.call('ZADD', scheduled, int(now + backoff), id)
          move(job, state, 'retrying')
          state = 'retrying'
        end
        event(events, state, attempt)
      end
    end

    local deadline = redis.call('ZSCORE', deadlines, id)
    if deadline and tonumber(deadline) <= now and (state == 'queued' or state == 'retrying') then
      redis.call('ZREM', ready, id)
      redis.call('ZREM', scheduled, id)
      redis.call('ZREM', deadlines, id)
      redis.call('HSET', job, 'error', fail('max_wait_exceeded', 'waited longer than max_wait without starting'))
      move(job, state, 'expired')
      finish(job, events)
      state = 'expired'
      event(events, state, attempt)
    end

    local due = redis.call('ZSCORE', scheduled, id)
    if due and tonumber(due) <= now and (state == 'queued' or state == 'retrying') then
      redis.call('ZREM', scheduled, id)
      enqueue(id, priority)
      if state == 'retrying' then
        move(job, state, 'queued')
        state = 'queued'
        event(events, state, attempt)
      end
    end

    local score = redis.call('ZSCORE', ready, id)
    if score and state == 'queued' then
      claimable[#claimable + 1] = {id = id, job = job, events = events, attempt = attempt, score = tonumber(score)}
    elseif score then
      redis.call('ZREM', ready, id) -- not waiting any more: never hand it out
    end
  end
end

table.sort(claimable, function(a, b) return a.score < b.score end)

local claimed = {}
for i = 1, math.min(want, #claimable) do
  local c = claimable[i]
  local exec_id = ARGV[7 + n + i]
  local token = redis.call('INCR', fence)
  local attempt = tonumber(c.attempt) + 1
  redis.call('ZREM', ready, c.id)
  -- max_wait bounds the wait before the first start only.
  redis.call('ZREM', deadlines, c.id)
  -- now is truncated to the millisecond: round the expiry up, so the lease
  -- never ends before the owner's trust window (claim sent + ttl) does.
  redis.call('ZADD', leases, int(now + 1 + ttl), c.id)
  redis.call('HSET', c.job, 'attempt', attempt, 'token', int(token),
    'exec_id', exec_id, 'exec_worker', worker, 'exec_attempt', attempt,
    'exec_started_at', int(now), 'exec_heartbeat_at', int(now),
    'exec_finished_at', '', 'exec_state', 'running')
  if redis.call('HGET', c.job, 'started_at') == '' then
    redis.call('HSET', c.job, 'started_at', int(now))
  end
  move(c.job, 'queued', 'running')
  event(c.events, 'running', attempt)
  local f = redis.call('HMGET', c.job, 'kind', 'input', 'timeout_ms')
  for _, v in ipairs({c.id, exec_id, token, attempt, f[1], f[2], f[3]}) do
    claimed[#claimed + 1] = v
  end
end
return claimed
