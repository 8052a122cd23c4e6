-- Does a queue's due work for the candidates the peek script found, then
-- claims up to `want` ready jobs for one worker: the first jobs of the
-- lanes at the head of the ready set (fair.lua), lanes taking turns. Every
-- candidate is checked again here: one another worker took since is skipped.
-- KEYS[1] ready   KEYS[2] scheduled   KEYS[3] leases   KEYS[4] deadlines
-- KEYS[5] fence   KEYS[6] fair (fair.lua)        KEYS[7] stats (stats.lua, finished.lua)
-- KEYS[8] retired
-- KEYS[6 + 3i] job hash, KEYS[7 + 3i] events and KEYS[8 + 3i] lane
-- (fair.lua) of candidate i (1..n)
-- KEYS[5 + 3n + 4j] job hash, KEYS[6 + 3n + 4j] events, KEYS[7 + 3n + 4j]
-- tenant index and KEYS[8 + 3n + 4j] all index of retired job j
-- ARGV[1] want    ARGV[2] lease ttl_ms      ARGV[3] worker id
-- ARGV[4] retention_ms (of a job that turns terminal)   ARGV[5] events MAXLEN
-- ARGV[6] backoff_ms before retrying a job whose lease expired
-- ARGV[7] d, the number of candidates with due work (the first d)
-- ARGV[8] n, the number of candidates   ARGV[9 .. 8+n] candidate job ids
-- ARGV[9+n .. 8+2n] the execution id of each candidate, should it be claimed
-- ARGV[9+2n .. 8+3n] whether each candidate holds the slots of its
-- concurrency keys: "1" it does, "0" one of its keys was full, "" it was
-- not asked for (the caller takes them in the keys' own slots first, with
-- the candidate's execution id: see execution/queue.go)
-- then r, the number of retired jobs the peek found past their retention,
-- and their r ids
-- Returns {blocked, lost, expired, then 10 values for each job claimed: id,
-- execution id, token, attempt, kind, input, timeout_ms, tenant, trace,
-- exec_trace}, where blocked lists the lanes left waiting because one of
-- their keys was full, lost lists 3 values for each
-- execution found lost (execution id, tenant, the job's new state), expired
-- the lane (concurrency keys) of each job expired at max_wait, trace
-- is the traceparent of the job's submit span and exec_trace that of its
-- last finished execution ("" or nil when there is none).
--
-- A job is claimed only if it holds a slot of every one of its keys (the
-- caller took them); the slots of a candidate not claimed are the
-- caller's to release.
--
-- A retry with the same arguments (the client resends a script whose reply
-- was lost) returns the jobs the first run claimed, found by their execution
-- ids, with their leases renewed: a lost reply never strands a claim.
--
-- Due work, for each of the first d candidates:
--   lease expired    running -> retrying | failed | cancelled (execution lost)
--   max_wait passed  queued | retrying -> expired
--   scheduled due    queued | retrying -> queued (into ready)
-- and for each retired job past its retention: its record is deleted.
-- The other candidates came from the ready set: they are only checked again.
local ready, scheduled, leases, deadlines = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local fence, fair, stats, retired = KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local want, ttl, worker = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3]
local retention, maxlen, backoff = ARGV[4], ARGV[5], tonumber(ARGV[6])
local d, n = tonumber(ARGV[7]), tonumber(ARGV[8])

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

-- Lua numbers would reach Redis as 14 significant digits: format integers.
local function int(x) return string.format('%.0f', x) end

-- Each number turned into a string costs a sprintf: the hot path formats
-- now once, and each job's attempt and token once.
local now_s = int(now)

local function event(events, state, attempt)
  redis.call('XADD', events, 'MAXLEN', '~', maxlen, '*',
    'type', 'state', 'data', '{"state":"' .. state .. '","attempt":' .. attempt .. '}')
end

-- Per-state counts change once per script, not once per job.
local counts = {}
local function move(job, tenant, from, to, ...)
  redis.call('HSET', job, 'state', to, ...)
  count(counts, tenant, from, -1)
  count(counts, tenant, to, 1)
end

-- Terminal jobs join the retired set once per script, not once per job.
local retiring = {}
local function retire(id)
  retiring[#retiring + 1] = int(now + tonumber(retention))
  retiring[#retiring + 1] = id
end

local function fail(code, message)
  return cjson.encode({code = code, message = message})
end

-- This call's execution ids, to recognise what a lost first run claimed.
local ours = {}
for i = 1, n do
  ours[ARGV[8 + n + i]] = true
end
local reclaimed = {}
local at = 8 + 3 * n

-- Retired jobs past their retention (checked again: the peek only read)
-- lose their record, events and listing entries.
local r = tonumber(ARGV[at + 1] or '0')
if r > 0 then
  local ids, dead, gone = {}, {}, {}
  for j = 1, r do
    ids[j] = ARGV[at + 1 + j]
  end
  local due_at = redis.call('ZMSCORE', retired, unpack(ids))
  for j = 1, r do
    if due_at[j] and tonumber(due_at[j]) <= now then
      dead[#dead + 1] = KEYS[5 + 3 * n + 4 * j]
      dead[#dead + 1] = KEYS[6 + 3 * n + 4 * j]
      gone[#gone + 1] = ids[j]
      redis.call('ZREM', KEYS[7 + 3 * n + 4 * j], ids[j])
      redis.call('ZREM', KEYS[8 + 3 * n + 4 * j], ids[j])
    end
  end
  if #gone > 0 then
    redis.call('DEL', unpack(dead))
    redis.call('ZREM', retired, unpack(gone))
  end
end

local live, lost, expired = {}, {}, {}
for i = 1, n do
  local id = ARGV[8 + i]
  local job, events, lane = KEYS[6 + 3 * i], KEYS[7 + 3 * i], KEYS[8 + 3 * i]
  -- What a claim needs; what only due work needs is read below, for the
  -- candidates that have some.
  local f = redis.call('HMGET', job, 'state', 'attempt', 'started_at', 'max_wait_ms', 'kind', 'input',
    'timeout_ms', 'exec_id', 'concurrency_keys', 'tenant', 'trace', 'exec_trace')
  local state, attempt = f[1], f[2]

  if not state then
    -- The record is gone (retention ran out): drop what still points at it.
    -- (Only a terminal job's record expires, and those wait in no lane.)
    redis.call('ZREM', scheduled, id)
    redis.call('ZREM', leases, id)
    redis.call('ZREM', deadlines, id)
  elseif f[1] == 'running' and ours[f[8]] then
    reclaimed[#reclaimed + 1] = {i = i, id = id, job = job, f = f}
  else
    if i <= d then
      local more = redis.call('HMGET', job, 'max_attempts', 'cancel_requested', 'priority')
      local max_attempts, cancel_requested, priority = more[1], more[2], more[3]
      local lease = redis.call('ZSCORE', leases, id)
      if lease and tonumber(lease) <= now then
        redis.call('ZREM', leases, id)
        if state == 'running' then
          -- The owner is gone. An acknowledged cancel is honoured, never retried.
          local next, err
          if cancel_requested == '1' then
            next, err = 'cancelled', fail('cancelled', 'cancelled; its worker was lost')
          elseif tonumber(attempt) >= tonumber(max_attempts) then
            next, err = 'failed', fail('lease_lost', 'worker lost on the last attempt')
          else
            next, err = 'retrying', fail('lease_lost', 'worker lost; retrying')
            redis.call('ZADD', scheduled, int(now + backoff), id)
          end
          move(job, f[10], state, next, 'error', err, 'exec_state', 'lost', 'exec_finished_at', int(now))
          if next ~= 'retrying' then
            redis.call('HSET', job, 'finished_at', int(now))
            retire(id)
          end
          state = next
          event(events, state, attempt)
          for _, v in ipairs({f[8] or '', f[10] or '', next}) do
            lost[#lost + 1] = v
          end
        end
      end

      local deadline = redis.call('ZSCORE', deadlines, id)
      if deadline and tonumber(deadline) <= now and (state == 'queued' or state == 'retrying') then
        fair_remove(fair, ready, lane, f[9], id)
        redis.call('ZREM', scheduled, id)
        redis.call('ZREM', deadlines, id)
        move(job, f[10], state, 'expired', 'finished_at', int(now),
          'error', fail('max_wait_exceeded', 'waited longer than max_wait without starting'))
        retire(id)
        state = 'expired'
        expired[#expired + 1] = f[9]
        event(events, state, attempt)
      end

      local due = redis.call('ZSCORE', scheduled, id)
      if due and tonumber(due) <= now and (state == 'queued' or state == 'retrying') then
        redis.call('ZREM', scheduled, id)
        fair_push(fair, ready, lane, f[9], id, priority)
        if state == 'retrying' then
          move(job, f[10], state, 'queued')
          state = 'queued'
          event(events, state, attempt)
        end
      end
    end

    live[#live + 1] = {i = i, id = id, job = job, events = events, lane = lane, f = f, state = state}
  end
end

-- Which candidates still wait in their lanes: one ZMSCORE per lane.
local by_lane = {}
for _, c in ipairs(live) do
  local g = group(by_lane, c.lane)
  g[#g + 1] = c
end
local claimable = {}
for set, g in pairs(by_lane) do
  local ids = {}
  for j, c in ipairs(g) do
    ids[j] = c.id
  end
  local places = redis.call('ZMSCORE', set, unpack(ids))
  for j, c in ipairs(g) do
    local place = places[j]
    if place and c.state == 'queued' then
      c.place = tonumber(place)
      claimable[#claimable + 1] = c
    elseif place then
      fair_remove(fair, ready, set, c.f[9], c.id) -- not waiting any more: never hand it out
    end
  end
end

-- The claimable jobs by lane, each lane's in its order, and each lane's
-- turn (its score in the ready set).
local lanes, names = {}, {}
for _, c in ipairs(claimable) do
  local l = lanes[c.f[9]]
  if not l then
    l = {name = c.f[9], set = c.lane, jobs = {}, next = 1, taken = {}}
    lanes[c.f[9]] = l
    names[#names + 1] = l.name
  end
  l.jobs[#l.jobs + 1] = c
end
if #names > 0 then
  local turns = redis.call('ZMSCORE', ready, unpack(names))
  for j, name in ipairs(names) do
    local l = lanes[name]
    -- Candidates arrive in lane order (a lane's first jobs, read in
    -- order): sort only when due work put some out of it.
    local sorted = true
    for k = 2, #l.jobs do
      sorted = sorted and l.jobs[k - 1].place < l.jobs[k].place
    end
    if not sorted then
      table.sort(l.jobs, function(a, b) return a.place < b.place end)
    end
    l.turn = turns[j] and tonumber(turns[j])
  end
end

local blocked = {}
local claimed = {blocked, lost, expired}
local function hand_out(id, exec_id, token, attempt, f)
  local k = #claimed
  claimed[k + 1], claimed[k + 2], claimed[k + 3], claimed[k + 4], claimed[k + 5] = id, exec_id, token, attempt, f[5]
  claimed[k + 6], claimed[k + 7], claimed[k + 8], claimed[k + 9], claimed[k + 10] = f[6], f[7], f[10], f[11], f[12]
end

-- now is truncated to the millisecond: round the expiry up, so the lease
-- never ends before the owner's trust window (claim sent + ttl) does.
local expires = int(now + 1 + ttl)
for _, r in ipairs(reclaimed) do
  redis.call('ZADD', leases, 'XX', expires, r.id)
  hand_out(r.id, r.f[8], tonumber(redis.call('HGET', r.job, 'token')), tonumber(r.f[2]), r.f)
end

-- The lane whose turn comes first (lowest ready score, ties by name), of
-- those with claimable jobs left and room.
local function first_lane()
  local best
  for _, l in pairs(lanes) do
    if l.turn and not l.full and l.jobs[l.next] and
      (not best or l.turn < best.turn or (l.turn == best.turn and l.name < best.name)) then
      best = l
    end
  end
  return best
end

-- Lanes in turn, one job each: after each claim the lane takes the
-- clock's next turn (fair.lua), and the clock moves to the turn taken. A
-- lane's jobs share their keys: when its next job does not fit, none of
-- its jobs does, and the lanes behind it are still served. Only Lua
-- state changes here; the writes follow, a few commands per batch.
local clock = tonumber(redis.call('HGET', fair, 'clock') or '0')
local clock_was = clock
local takes = {}
while #takes < want - #reclaimed do
  local l = first_lane()
  if not l then
    break
  end
  local c = l.jobs[l.next]
  local slots = ARGV[8 + 2 * n + c.i]
  if slots == '1' then
    takes[#takes + 1] = c
    l.taken[#l.taken + 1] = c.id
    l.next = l.next + 1
    clock = math.max(clock, fair_start(l.turn))
    l.start = clock + 1
    l.turn = l.jobs[l.next] and l.start
  else
    l.full = true -- this claim serves the lane no further
    if slots == '0' then
      blocked[#blocked + 1] = l.name
    end
  end
end

-- The claimed jobs' executions, one HSET and one event each; their
-- leases, tokens and lanes in a few commands for the whole batch.
if #takes > 0 then
  local token = redis.call('INCRBY', fence, #takes) - #takes
  local lease_args, waited = {}, {}
  for _, c in ipairs(takes) do
    local exec_id = ARGV[8 + n + c.i]
    token = token + 1
    local n_attempt = tonumber(c.f[2]) + 1
    local attempt = tostring(n_attempt)
    if c.f[4] ~= '0' then
      waited[#waited + 1] = c.id -- max_wait bounds the wait before the first start only
    end
    lease_args[#lease_args + 1] = expires
    lease_args[#lease_args + 1] = c.id
    local fields = {'attempt', attempt, 'token', int(token), 'exec_id', exec_id, 'exec_worker', worker,
      'exec_attempt', attempt, 'exec_started_at', now_s, 'exec_heartbeat_at', now_s, 'exec_state', 'running'}
    -- Fields still as the submit wrote them are left alone: the job's
    -- first start is kept, and a job that never ran has no end to clear.
    if c.f[3] == '' then
      fields[#fields + 1], fields[#fields + 2] = 'started_at', now_s
    end
    if c.f[8] ~= '' then
      fields[#fields + 1], fields[#fields + 2] = 'exec_finished_at', ''
    end
    move(c.job, c.f[10], 'queued', 'running', unpack(fields))
    event(c.events, 'running', attempt)
    hand_out(c.id, exec_id, token, n_attempt, c.f)
  end
  redis.call('ZADD', leases, unpack(lease_args))
  if #waited > 0 then
    redis.call('ZREM', deadlines, unpack(waited))
  end
  for _, l in pairs(lanes) do
    if #l.taken > 0 then
      fair_take(fair, ready, l.set, l.name, l.taken, l.start)
    end
  end
end

if #retiring > 0 then
  redis.call('ZADD', retired, unpack(retiring))
end
if clock ~= clock_was then
  redis.call('HSET', fair, 'clock', int(clock))
end
write_counts(stats, counts)
for state, delta in pairs(counts) do
  count_finished(stats, now, state, delta) -- the ended states only
end
return claimed
