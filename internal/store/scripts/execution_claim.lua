-- Does a queue's due work for the candidates the peek script found, then
-- claims up to `want` ready jobs for one worker: the first jobs of the
-- lanes at the head of the ready set (fair.lua), lanes taking turns. Every
-- candidate is checked again here: one another worker took since is skipped.
-- KEYS[1] ready   KEYS[2] scheduled   KEYS[3] leases   KEYS[4] deadlines
-- KEYS[5] fence (fence.lua)   KEYS[6] fair (fair.lua)        KEYS[7] stats (stats.lua, finished.lua)
-- KEYS[8] retired
-- KEYS[6 + 3i] job hash, KEYS[7 + 3i] events and KEYS[8 + 3i] lane
-- (fair.lua) of candidate i (1..n)
-- KEYS[4 + 3n + 5j] job hash, KEYS[5 + 3n + 5j] events, KEYS[6 + 3n + 5j]
-- tenant index, KEYS[7 + 3n + 5j] folded key (transition.lua's fold) and
-- KEYS[8 + 3n + 5j] the tenant's retained bytes (stats.lua) of retired job j
-- KEYS[#KEYS - 1] the usage day the executions started and lost are
-- counted in (stats.lua)   KEYS[#KEYS], the last, the webhook outbox
-- (transition.lua)
-- ARGV[1] want    ARGV[2] lease ttl_ms      ARGV[3] worker id
-- ARGV[4] retention_ms (of a job that turns terminal)   ARGV[5] events MAXLEN
-- ARGV[6] backoff_ms before retrying a job whose lease expired
-- ARGV[7] d, the number of candidates with due work (the first d)
-- ARGV[8] n, the number of candidates   ARGV[9 .. 8+n] candidate job ids
-- ARGV[9+n .. 8+2n] the execution id of each candidate, should it be claimed
-- ARGV[9+2n .. 8+3n] whether each candidate holds the slots of its
-- concurrency keys: "1" it does, "1:<tokens>" it does and reserved that
-- many tokens of its keys' tpm budgets, "0" one of its keys was full, ""
-- it was not asked for (the caller takes them in the keys' own slots
-- first, with the candidate's execution id: see execution/reserve.go; a
-- candidate of a kind the worker does not serve is not asked for)
-- ARGV[9+3n .. 8+4n] the lane (fair.lua) of each candidate, whose sorted
-- set is its KEYS[8 + 3i]
-- then r, the number of retired jobs the peek found past their retention,
-- and their r ids; ARGV[#ARGV], the last, when the usage day's counts are
-- dropped (unix ms; "" = not counted)
-- (newClaimArgs in execution/claim.go is the one place in Go that lays
-- these KEYS and ARGV out: change the two together.)
-- Returns {blocked, expired, costs, then 12 values for each job claimed: id,
-- execution id, token, attempt, kind, input, timeout_ms, tenant, trace,
-- exec_trace, checkpoint, signal}, where blocked lists the lanes left waiting because one of
-- their keys was full, expired the lane of each job expired at max_wait, costs
-- the lane and cost of each candidate that reserved tokens and was taken,
-- or left because its cost is above what it reserved, trace
-- is the traceparent of the job's submit span and exec_trace that of its
-- last finished execution ("" or nil when there is none), checkpoint and
-- signal the job's (see transition.lua; "" for none).
--
-- A job is claimed only if it holds a slot of every one of its keys (the
-- caller took them), and reserved at least its cost of their tpm budgets
-- (the caller may reserve before it reads the job: its lane's last cost);
-- the slots of a candidate not claimed are the caller's to release.
--
-- A retry with the same arguments (the client resends a script whose reply
-- was lost) returns the jobs the first run claimed, found by their execution
-- ids, with their leases renewed: a lost reply never strands a claim.
--
-- Due work, for each of the first d candidates:
--   lease expired    running -> retrying | failed | cancelled (execution lost)
--   max_wait passed  queued | retrying -> expired
--   scheduled due    queued | retrying -> queued (into ready)
--   wait timed out   waiting -> queued (into ready; signal says timed_out)
-- and for each retired job past its retention: its record is deleted.
-- The other candidates came from the ready set: they are only checked again.
-- Every change of a job's state is a move (transition.lua).
--
-- In order, one local function each: delete_retired; check, which reads
-- every candidate (due.lua's due_read) and, for those with due work,
-- reaps, expires and promotes (due.lua); waiting, the candidates still in
-- their lanes; lanes_of, their lanes and turns; take, which chooses the
-- jobs (lanes in turn, keys held); start, which claims them.
local ready, scheduled, leases, deadlines = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local fence, fair, stats, retired = KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local want, ttl, worker = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3]
local retention, maxlen, backoff = ARGV[4], ARGV[5], tonumber(ARGV[6])
local d, n = tonumber(ARGV[7]), tonumber(ARGV[8])

local now_us = clock_us() -- the fencing tokens' floor (fence.lua)
local now = math.floor(now_us / 1000)
-- Each number turned into a string costs a sprintf: the hot path formats
-- now once (tx.now_s), and each job's attempt and token once.
local tx = transitions(stats, retired, now, retention, maxlen, KEYS[#KEYS])
use_day(tx, KEYS[#KEYS - 1], ARGV[#ARGV])

-- The due work of the candidates (due.lua): the queue's keys and clock.
local due = {leases = leases, scheduled = scheduled, deadlines = deadlines, fair = fair, ready = ready, now = now,
  backoff = backoff, tx = tx}

-- delete_retired deletes the retired jobs the peek found past their
-- retention (due.lua). The ids follow the candidates' ARGV at at.
local function delete_retired(at)
  local ids = {}
  for k = 1, tonumber(ARGV[at + 1] or '0') do
    ids[k] = ARGV[at + 1 + k]
  end
  due_delete_retired(due, retired, ids, 9 + 3 * n)
end

-- check reads every candidate again and does the due work of the first d.
-- It returns the candidates still alive, those an earlier run of this very
-- call claimed (recognised by their execution ids, ARGV after the
-- candidates' ids), and the expired list of the reply.
local function check()
  local ours = {}
  for i = 1, n do
    ours[ARGV[8 + n + i]] = true
  end
  local live, reclaimed, expired = {}, {}, {}
  for i = 1, n do
    local c = due_read(i, ARGV[8 + i], KEYS[6 + 3 * i], KEYS[7 + 3 * i], KEYS[8 + 3 * i], ARGV[8 + 3 * n + i], i <= d)
    if not c.state then
      due_gone(due, c.id) -- the record is gone (retention ran out)
    elseif c.state == 'running' and ours[c.f[EXEC_ID]] then
      reclaimed[#reclaimed + 1] = c
    else
      if i <= d then
        due_reap(due, c)
        due_expire(due, c, expired)
        due_promote(due, c)
      end
      live[#live + 1] = c
    end
  end
  return live, reclaimed, expired
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
      if places[k] and c.state == 'queued' then
        c.place = tonumber(places[k])
        claimable[#claimable + 1] = c
      elseif places[k] then
        fair_remove(fair, ready, set, c.name, c.id)
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
    local name = c.name
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

-- share is how many turns of the clock come between two of lane l's: its
-- tenant's lanes in the ready set share one turn (fair.lua).
local function share(l)
  if not l.share then
    l.share = math.max(fair_lanes(fair, l.name), 1)
  end
  return l.share
end

-- take chooses up to room jobs, lanes in turn, one job each: after each
-- take the lane takes its tenant's next turn (fair.lua), and the clock
-- moves to the turn taken. A job is taken only if it holds a slot of
-- every one of its keys (ARGV after the execution ids): a lane's jobs
-- share their keys, so when its next job does not fit none does, and the
-- lanes behind it are still served. A job whose cost is above the tokens
-- it reserved is not taken either, nor its lane served further; costs
-- gets the lane and cost of each job that reserved tokens. Only Lua state
-- changes here. It returns the jobs taken, the lanes left waiting for a
-- full key (also those behind the last taken: the caller marks a job "0"
-- that it did not ask for when its key refused another of its tenant's
-- jobs), and the clock.
local function take(lanes, room, clock, costs)
  local takes, blocked = {}, {}
  while #takes < room do
    local l = first_lane(lanes)
    if not l then
      break
    end
    local c = l.jobs[l.next]
    local slots = ARGV[8 + 2 * n + c.i]
    local reserved = #slots > 2 and tonumber(slots:sub(3))
    local short = false
    if reserved then
      slots = '1'
      local cost = c.f[COST] or '0'
      costs[#costs + 1], costs[#costs + 2] = l.name, cost
      short = (tonumber(cost) or 0) > reserved
    end
    if slots == '1' and not short then
      takes[#takes + 1] = c
      l.taken[#l.taken + 1] = c.id
      l.next = l.next + 1
      clock = math.max(clock, fair_start(l.turn))
      l.start = clock + share(l)
      l.turn = l.jobs[l.next] and l.start
    else
      l.full = true -- this claim serves the lane no further
      if slots == '0' then
        blocked[#blocked + 1] = l
      end
    end
  end
  for _, l in pairs(lanes) do
    local c = l.jobs[l.next]
    if l.turn and not l.full and c and ARGV[8 + 2 * n + c.i] == '0' then
      l.full = true
      blocked[#blocked + 1] = l
    end
  end
  return takes, blocked, clock
end

-- give_way moves each lane of blocked that took no job back by its
-- tenant's share of turns after the clock, all but the first (by turn) of
-- each tenant: a lane waiting for a full key gives its turn up to the
-- lanes behind it, so that one tenant's waiting lanes, however many, never
-- fill a claim's bounded look and hide the others. The first of each
-- tenant keeps its turn, so that lanes of different tenants waiting for
-- one key are served in their order when it has room again. It returns
-- the lanes' names.
local function give_way(blocked, clock)
  table.sort(blocked, function(a, b) return a.turn < b.turn or (a.turn == b.turn and a.name < b.name) end)
  local names, kept, moves = {}, {}, {}
  for k, l in ipairs(blocked) do
    names[k] = l.name
    local tenant = fair_tenant(l.name)
    local behind = kept[tenant]
    kept[tenant] = (behind or -1) + 1
    if behind and #l.taken == 0 then
      moves[#moves + 1] = fair_int(math.max(fair_start(l.turn), clock) + share(l) + behind)
      moves[#moves + 1] = l.name
    end
  end
  if #moves > 0 then
    redis.call('ZADD', ready, 'XX', unpack(moves))
  end
  return names
end

-- The reply: blocked, expired, costs, then 12 values per job handed
-- out. The checkpoint and the signal that resumed the job are read for the
-- jobs handed out alone: a candidate not taken would carry up to 256 KiB
-- for nothing. A job never started has neither (an execution writes the
-- checkpoint, and a signal resumes a wait, which an execution began), and
-- most jobs handed out are such.
local function hand_out(reply, c, exec_id, token, attempt)
  local k = #reply
  local r = {}
  if c.f[STARTED_AT] ~= '' then
    r = redis.call('HMGET', c.key, 'checkpoint', 'signal')
  end
  reply[k + 1], reply[k + 2], reply[k + 3], reply[k + 4], reply[k + 5] = c.id, exec_id, token, attempt, c.f[KIND]
  reply[k + 6], reply[k + 7], reply[k + 8], reply[k + 9], reply[k + 10] = c.f[INPUT], c.f[TIMEOUT_MS], c.tenant, c.f[TRACE], c.f[EXEC_TRACE]
  reply[k + 11], reply[k + 12] = r[1] or '', r[2] or ''
end

-- start claims the jobs taken: a new execution each (one move: one HSET
-- and one event, counted in its tenant's usage), their leases, tokens and
-- lanes in a few commands for the whole batch. expires is the leases'
-- expiry.
local function start(takes, lanes, expires, reply)
  local token = fence_take(fence, #takes, now_us)
  local lease_args, waited = {}, {}
  for _, c in ipairs(takes) do
    token = token + 1
    -- The attempt of an execution that spent none (transition.lua's
    -- unspent) is run again: attempt numbers never go back.
    local n_attempt = tonumber(c.f[ATTEMPT])
    if c.f[UNSPENT] then
      redis.call('HDEL', c.key, 'unspent')
    else
      n_attempt = n_attempt + 1
    end
    local attempt = int(n_attempt)
    if c.f[MAX_WAIT_MS] ~= '0' then
      waited[#waited + 1] = c.id -- max_wait bounds the wait before the first start only
    end
    lease_args[#lease_args + 1] = expires
    lease_args[#lease_args + 1] = c.id
    local exec_id, token_s = ARGV[8 + n + c.i], int(token)
    local fields = {'attempt', attempt, 'token', token_s, 'exec_id', exec_id, 'exec_worker', worker,
      'exec_attempt', attempt, 'exec_started_at', tx.now_s, 'exec_heartbeat_at', tx.now_s, 'exec_state', 'running'}
    -- An execution before this one ended: its end is cleared. A job's
    -- first has none to clear (an absent field reads as "").
    if c.f[EXEC_ID] then
      fields[#fields + 1], fields[#fields + 2] = 'exec_finished_at', ''
    end
    -- The job's first start is kept.
    local started_at = c.f[STARTED_AT]
    if started_at == '' then
      started_at = tx.now_s
      fields[#fields + 1], fields[#fields + 2] = 'started_at', started_at
    end
    move(tx, c, 'running', fields, attempt,
      {started_at, '0', c.f[ERROR] or '', token_s, exec_id, worker, attempt, tx.now_s, tx.now_s, ''})
    hand_out(reply, c, exec_id, token, n_attempt)
    use(tx, c.tenant, 'executions_started')
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

delete_retired(8 + 4 * n)
local live, reclaimed, expired = check()
local lanes = lanes_of(waiting(live))

-- now is truncated to the millisecond: round the expiry up, so the lease
-- never ends before the owner's trust window (claim sent + ttl) does.
local expires = int(now + 1 + ttl)
local reply = {{}, expired, {}}
for _, c in ipairs(reclaimed) do
  redis.call('ZADD', leases, 'XX', expires, c.id)
  hand_out(reply, c, c.f[EXEC_ID], tonumber(redis.call('HGET', c.key, 'token')), tonumber(c.f[ATTEMPT]))
end

local clock_was = fair_clock(fair)
local takes, blocked, clock = take(lanes, want - #reclaimed, clock_was, reply[3])
reply[1] = give_way(blocked, clock)
if #takes > 0 then
  start(takes, lanes, expires, reply)
end
if clock ~= clock_was then
  redis.call('HSET', fair, 'clock', int(clock))
end
settle(tx)
return reply
