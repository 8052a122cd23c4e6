-- Creates a job, unless it already exists: its first move (transition.lua).
-- KEYS[1] job hash      KEYS[2] ready       KEYS[3] scheduled   KEYS[4] deadlines
-- KEYS[5] fair (fair.lua)   KEYS[6] stats (stats.lua)   KEYS[7] events   KEYS[8] tenant index
-- KEYS[9] all index   KEYS[10] the job's lane (fair.lua)
-- KEYS[11] the job's deletion mark (job_delete.lua)
-- ARGV[1] id            ARGV[2] tenant      ARGV[3] queue       ARGV[4] kind
-- ARGV[5] priority (-100..100)              ARGV[6] max_attempts
-- ARGV[7] concurrency_keys (JSON array)     ARGV[8] input (JSON)
-- ARGV[9] metadata (JSON or "")             ARGV[10] timeout_ms
-- ARGV[11] max_wait_ms (0 = unlimited)      ARGV[12] on_busy
-- ARGV[13] delay_ms     ARGV[14] events stream MAXLEN
-- ARGV[15] traceparent of the submit span ("" when tracing is off)
-- ARGV[16] nonce of this call (the same when the client resends it)
-- ARGV[17] how many of the tenant's jobs not ended this queue may hold
-- before this one ("" = no cap)
-- ARGV[18] the name of the schedule that fires it ("" = none)
-- ARGV[19] the tokens the job is estimated to spend of its keys' tpm
-- budgets ("" = none)
-- ARGV[20] the URL its ends are POSTed to ("" = none)
-- Returns {1, HGETALL of the job} when created (also to a resent call that
-- had created it: its nonce is the job's), {0, HGETALL} when it existed,
-- {-1, n} when the queue holds n >= ARGV[17] of the tenant's jobs not
-- ended (nothing written), {-2, 0} when the job was deleted (nothing
-- written: a replay does not bring it back).
local job, ready, scheduled, deadlines = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local fair, stats, events, tenant_index, all_index = KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9]
local id, priority, max_wait, delay = ARGV[1], tonumber(ARGV[5]), tonumber(ARGV[11]), tonumber(ARGV[13])

-- A retried idempotent request and a crashed winner's successor both land
-- here with the same id: only the first creates. A client that lost the
-- reply and resent this very call finds its own nonce: it created the job.
if redis.call('EXISTS', job) == 1 then
  local created = 0
  if redis.call('HGET', job, 'nonce') == ARGV[16] then
    created = 1
  end
  return {created, redis.call('HGETALL', job)}
end
if redis.call('EXISTS', KEYS[11]) == 1 then
  return {-2, 0}
end

if ARGV[17] ~= '' then
  local n = unended(stats, ARGV[2])
  if n >= tonumber(ARGV[17]) then
    return {-1, n}
  end
end

local now = redis_now()
local tx = transitions(stats, nil, now, nil, ARGV[14])

-- A small hash is a listpack that Redis searches from the front: the
-- fields claims and finishes read come first (each field HMGET reads costs
-- a scan up to it: what both read, then the execution's fields a finish's
-- event carries, then what only claims read), then those only written, and
-- those only due work, cancels and reads use come last.
-- The move writes state first. (The fields: transition.lua.)
move(tx, {key = job, events = events, id = id, tenant = ARGV[2], state = ''}, 'queued', {
  'token', '0', 'attempt', '0', 'exec_id', '', 'exec_state', '', 'cancel_requested', '0',
  'started_at', '', 'error', '', 'tenant', ARGV[2], 'exec_worker', '', 'exec_attempt', '',
  'exec_started_at', '', 'exec_heartbeat_at', '', 'max_wait_ms', ARGV[11], 'concurrency_keys', ARGV[7],
  'kind', ARGV[4], 'input', ARGV[8], 'timeout_ms', ARGV[10], 'trace', ARGV[15], 'exec_trace', '',
  'exec_finished_at', '', 'finished_at', '', 'result', '', 'max_attempts', ARGV[6], 'priority', ARGV[5],
  'id', id, 'queue', ARGV[3], 'created_at', int(now), 'metadata', ARGV[9], 'on_busy', ARGV[12],
  'nonce', ARGV[16], 'schedule', ARGV[18], 'cost', ARGV[19], 'webhook', ARGV[20]}, '0', {'', '0', '', '0', '', '', '', '', '', ''})

if delay > 0 then
  redis.call('ZADD', scheduled, now + delay, id)
else
  fair_push(fair, ready, KEYS[10], ARGV[7], id, priority)
end
-- max_wait counts from when the job may first run, so a delay does not eat it.
if max_wait > 0 then
  redis.call('ZADD', deadlines, now + delay + max_wait, id)
end

redis.call('ZADD', tenant_index, now, id)
redis.call('ZADD', all_index, now, id)
settle(tx)

return {1, redis.call('HGETALL', job)}
