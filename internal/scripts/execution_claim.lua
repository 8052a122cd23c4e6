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
-- Every change of a job's state is a move (transition.lua).
--
-- In order, one local function each: delete_retired; check, which reads
-- every candidate and, for those with due work, reaps, expires and
-- promotes; waiting, the candidates still in their lanes; lanes_of, their
-- lanes and turns; take, which chooses the jobs (lanes in turn, keys
-- held); start, which claims them.
local ready, scheduled, leases, deadlines = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local fence, fair, stats, retired = KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local want, ttl, worker = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3]
local retention, maxlen, backoff = ARGV[4], ARGV[5], tonumber(ARGV[6])
local d, n = tonumber(ARGV[7]), tonumber(ARGV[8])

local now = redis_now()
-- Each number turned into a string costs a sprintf: the hot path formats
-- now once (tx.now_s), and each job's attempt and token once.
local tx = transitions(stats, retired, now, retention, maxlen)

-- What a claim needs of each candidate, with the SHOWN fields
-- (transition.lua) the claim's move does not write; those with due work
-- also read what their moves depend on, and the execution's fields they
-- keep, and token (the claim's move writes it; a reclaimed job, rare,
-- reads it apart). One HMGET each.
local CLAIM_FIELDS = {'started_at', 'max_wait_ms', 'kind', 'input', 'timeout_ms', 'exec_id',
  'concurrency_keys', 'tenant', 'trace', 'exec_trace', 'error', 'cancel_requested'}
local read_ready = job_reader(CLAIM_FIELDS)
local read_due = job_reader(CLAIM_FIELDS, {'token', 'max_attempts', 'priority', 'exec_worker', 'exec_attempt',
  'exec_started_at', 'exec_heartbeat_at', 'exec_finished_at'})

local function fail(code, message)
  return cjson.encode({code = code, message = message})
end

-- delete_retired deletes the retired jobs the peek found past their
-- retention (checked again: the peek only read): their record, events and
-- listing entries. The ids follow the candidates' ARGV at at.
local function delete_retired(at)
  local r = tonumber(ARGV[at + 1] or '0')
  if r == 0 then
    return
  end
  local ids = {}
  for k = 1, r do
    ids[k] = ARGV[at + 1 + k]
  end
  local due_at = redis.call('ZMSCORE', retired, unpack(ids))
  local gone, dead, indexes = {}, {}, {}
  for k = 1, r do
    if due_at[k] and tonumber(due_at[k]) <= now then
      local base = 5 + 3 * n + 4 * k
      gone[#gone + 1] = ids[k]
      dead[#dead + 1], dead[#dead + 2] = KEYS[base], KEYS[base + 1]
      indexes[#indexes + 1] = {KEYS[base + 2], KEYS[base + 3]}
    end
  end
  if #gone > 0 then
    forget(retired, gone, dead, indexes)
  end
end

-- reap finalises c's execution if its lease expired: the owner is gone.
-- Its job is retried (spending the attempt), or fails on its last attempt,
-- or, when a cancel was acknowledged, is cancelled, never retried. lost
-- gets 3 values per execution: its id, the tenant, the job's new state.
local function reap(c, lost)
  local lease = redis.call('ZSCORE', leases, c.id)
  if not lease or tonumber(lease) > now then
    return
  end
  redis.call('ZREM', leases, c.id)
  local f = c.f
  if f.state ~= 'running' then
    return
  end
  local next, err
  if f.cancel_requested == '1' then
    next, err = 'cancelled', fail('cancelled', 'cancelled; its worker was lost')
  elseif tonumber(f.attempt) >= tonumber(f.max_attempts) then
    next, err = 'failed', fail('lease_lost', 'worker lost on the last attempt')
  else
    next, err = 'retrying', fail('lease_lost', 'worker lost; retrying')
    redis.call('ZADD', scheduled, int(now + backoff), c.id)
  end
  local exec_id = f.exec_id
  move(tx, c, next, {'error', err, 'exec_state', 'lost', 'exec_finished_at', tx.now_s})
  for _, v in ipairs({exec_id or '', f.tenant or '', next}) do
    lost[#lost + 1] = v
  end
end

-- expire ends c as expired if it waited past its max_wait without
-- starting; expired gets its lane.
local function expire(c, expired)
  local deadline = redis.call('ZSCORE', deadlines, c.id)
  local state = c.f.state
  if not deadline or tonumber(deadline) > now or (state ~= 'queued' and state ~= 'retrying') then
    return
  end
  fair_remove(fair, ready, c.lane, c.f.concurrency_keys, c.id)
  redis.call('ZREM', scheduled, c.id)
  redis.call('ZREM', deadlines, c.id)
  move(tx, c, 'expired', {'error', fail('max_wait_exceeded', 'waited longer than max_wait without starting')})
  expired[#expired + 1] = c.f.concurrency_keys
end

-- promote makes c ready if its time came (a delay, a retry's backoff).
local function promote(c)
  local due = redis.call('ZSCORE', scheduled, c.id)
  local state = c.f.state
  if not due or tonumber(due) > now or (state ~= 'queued' and state ~= 'retrying') then
    return
  end
  redis.call('ZREM', scheduled, c.id)
  fair_push(fair, ready, c.lane, c.f.concurrency_keys, c.id, c.f.priority)
  if state == 'retrying' then
    move(tx, c, 'queued')
  end
end

-- check reads every candidate again and does the due work of the first d.
-- It returns the candidates still alive, those an earlier run of this very
-- call claimed (recognised by their execution ids, ARGV after the
-- candidates' ids), and the lost and expired lists of the reply.
local function check()
  local ours = {}
  for i = 1, n do
    ours[ARGV[8 + n + i]] = true
  end
  local live, reclaimed, lost, expired = {}, {}, {}, {}
  for i = 1, n do
    local read = i <= d and read_due or read_ready
    local c = read(KEYS[6 + 3 * i], KEYS[7 + 3 * i], ARGV[8 + i])
    c.i, c.lane = i, KEYS[8 + 3 * i]
    if not c.f.state then
      -- The record is gone (retention ran out): drop what still points at it.
      -- (Only a terminal job's record is deleted, and those wait in no lane.)
      redis.call('ZREM', scheduled, c.id)
      redis.call('ZREM', leases, c.id)
      redis.call('ZREM', deadlines, c.id)
    elseif c.f.state == 'running' and ours[c.f.exec_id] then
      reclaimed[#reclaimed + 1] = c
    else
      if i <= d then
        reap(c, lost)
        expire(c, expired)
        promote(c)
      end
      live[#live + 1] = c
    end
  end
  return live, reclaimed, lost, expired
end

-- waiting returns the candidates of live still queued in their lanes (one
-- ZMSCORE per lane), each with its place there; one that is in its lane
-- but not queued any more is taken out, never handed out.
local function waiting(live)
  local by_lane = {}
  for _, c in ipairs(live) do
    local g = group(by_lane, c.lane)
    g[#g + 1] = c
  end
  local claimable = {}
  for set, g in pairs(by_lane) do
    local ids = {}
    for k, c in ipairs(g) do
      ids[k] = c.id
    end
    local places = redis.call('ZMSCORE', set, unpack(ids))
    for k, c in ipairs(g) do
      if places[k] and c.f.state == 'queued' then
        c.place = tonumber(places[k])
        claimable[#claimable + 1] = c
      elseif places[k] then
        fair_remove(fair, ready, set, c.f.concurrency_keys, c.id)
      end
    end
  end
  return claimable
end

-- lanes_of groups the claimable jobs by lane, each lane's in its order,
-- with each lane's turn (its score in the ready set).
local function lanes_of(claimable)
  local lanes, names = {}, {}
  for _, c in ipairs(claimable) do
    local name = c.f.concurrency_keys
    local l = lanes[name]
    if not l then
      l = {name = name, set = c.lane, jobs = {}, next = 1, taken = {}}
      lanes[name] = l
      names[#names + 1] = name
    end
    l.jobs[#l.jobs + 1] = c
  end
  if #names == 0 then
    return lanes
  end
  local turns = redis.call('ZMSCORE', ready, unpack(names))
  for k, name in ipairs(names) do
    local l = lanes[name]
    -- Candidates arrive in lane order (a lane's first jobs, read in
    -- order): sort only when due work put some out of it.
    local sorted = true
    for m = 2, #l.jobs do
      sorted = sorted and l.jobs[m - 1].place < l.jobs[m].place
    end
    if not sorted then
      table.sort(l.jobs, function(a, b) return a.place < b.place end)
    end
    l.turn = turns[k] and tonumber(turns[k])
  end
  return lanes
end

-- first_lane is the lane whose turn comes first (lowest ready score, ties
-- by name), of those with claimable jobs left and room.
local function first_lane(lanes)
  local best
  for _, l in pairs(lanes) do
    if l.turn and not l.full and l.jobs[l.next] and
      (not best or l.turn < best.turn or (l.turn == best.turn and l.name < best.name)) then
      best = l
    end
  end
  return best
end

-- take chooses up to room jobs, lanes in turn, one job each: after each
-- take the lane takes the clock's next turn (fair.lua), and the clock
-- moves to the turn taken. A job is taken only if it holds a slot of
-- every one of its keys (ARGV after the execution ids): a lane's jobs
-- share their keys, so when its next job does not fit none does, and the
-- lanes behind it are still served. Only Lua state changes here. It
-- returns the jobs taken, the lanes left waiting for a full key, and the
-- clock.
local function take(lanes, room, clock)
  local takes, blocked = {}, {}
  while #takes < room do
    local l = first_lane(lanes)
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
  return takes, blocked, clock
end

-- The reply: blocked, lost, expired, then 10 values per job handed out.
local function hand_out(reply, c, token, attempt)
  local f, k = c.f, #reply
  reply[k + 1], reply[k + 2], reply[k + 3], reply[k + 4], reply[k + 5] = c.id, f.exec_id, token, attempt, f.kind
  reply[k + 6], reply[k + 7], reply[k + 8], reply[k + 9], reply[k + 10] = f.input, f.timeout_ms, f.tenant, f.trace, f.exec_trace
end

-- start claims the jobs taken: a new execution each (one move: one HSET
-- and one event), their leases, tokens and lanes in a few commands for the
-- whole batch. expires is the leases' expiry.
local function start(takes, lanes, expires, reply)
  local token = redis.call('INCRBY', fence, #takes) - #takes
  local lease_args, waited = {}, {}
  for _, c in ipairs(takes) do
    token = token + 1
    local n_attempt = tonumber(c.f.attempt) + 1
    local attempt = tostring(n_attempt)
    if c.f.max_wait_ms ~= '0' then
      waited[#waited + 1] = c.id -- max_wait bounds the wait before the first start only
    end
    lease_args[#lease_args + 1] = expires
    lease_args[#lease_args + 1] = c.id
    local fields = {'attempt', attempt, 'token', int(token), 'exec_id', ARGV[8 + n + c.i], 'exec_worker', worker,
      'exec_attempt', attempt, 'exec_started_at', tx.now_s, 'exec_heartbeat_at', tx.now_s, 'exec_state', 'running',
      'exec_finished_at', ''}
    -- The job's first start is kept.
    if c.f.started_at == '' then
      fields[#fields + 1], fields[#fields + 2] = 'started_at', tx.now_s
    end
    move(tx, c, 'running', fields)
    hand_out(reply, c, token, n_attempt)
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

delete_retired(8 + 3 * n)
local live, reclaimed, lost, expired = check()
local lanes = lanes_of(waiting(live))

-- now is truncated to the millisecond: round the expiry up, so the lease
-- never ends before the owner's trust window (claim sent + ttl) does.
local expires = int(now + 1 + ttl)
local reply = {{}, lost, expired}
for _, c in ipairs(reclaimed) do
  redis.call('ZADD', leases, 'XX', expires, c.id)
  hand_out(reply, c, tonumber(redis.call('HGET', c.key, 'token')), tonumber(c.f.attempt))
end

local clock_was = fair_clock(fair)
local takes, blocked, clock = take(lanes, want - #reclaimed, clock_was)
reply[1] = blocked
if #takes > 0 then
  start(takes, lanes, expires, reply)
end
if clock ~= clock_was then
  redis.call('HSET', fair, 'clock', int(clock))
end
settle(tx)
return reply
