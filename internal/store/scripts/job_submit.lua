-- Creates jobs of one tenant in one queue, each unless it already exists:
-- each job's first move (transition.lua). One call takes a batch of n
-- jobs (n >= 1), created in order; each is answered on its own.
-- Shared by the batch:
-- KEYS[1] ready   KEYS[2] scheduled   KEYS[3] deadlines   KEYS[4] fair (fair.lua)
-- KEYS[5] stats (stats.lua)   KEYS[6] tenant index
-- KEYS[7] the usage day each job created is counted in (stats.lua)
-- KEYS[8] the tenant's retained bytes in this queue (stats.lua)
-- ARGV[1] tenant   ARGV[2] events stream MAXLEN
-- ARGV[3] how many of the tenant's jobs not ended this queue may hold
-- before the batch's first job ("" = no cap)
-- ARGV[4] when the usage day's counts are dropped (unix ms; "" = not counted)
-- ARGV[5] how many bytes the tenant's jobs in this queue may be charged
-- before the batch's first job ("" = no quota)
-- Then per job i (from 0): KEYS[9 + 5i + k] and ARGV[6 + 17i + k]:
-- k=0 job hash   k=1 events   k=2 the job's lane (fair.lua)
-- k=3 the job's deletion mark (job_delete.lua)   k=4 its folded key (transition.lua's fold)
-- k=0 id   k=1 kind   k=2 priority (-100..100)   k=3 max_attempts
-- k=4 concurrency_keys (JSON array)   k=5 input (JSON)   k=6 metadata (JSON or "")
-- k=7 timeout_ms   k=8 max_wait_ms (0 = unlimited)   k=9 on_busy
-- k=10 delay_ms   k=11 traceparent of the submit span ("" when tracing is off)
-- k=12 nonce of this call (the same when the client resends it) for an
-- item with an idempotency key; "" for one without
-- k=13 the name of the schedule that fires it ("" = none)
-- k=14 the tokens the job is estimated to spend of its keys' tpm budgets ("" = none)
-- k=15 the URL its ends are POSTed to ("" = none)
-- k=16 "1" when the id is an earlier request's (an idempotency key's
-- replay), which may have been deleted since; "" for an id made by this call
-- (submitCall in internal/store/job_calls.go is the one place in Go that lays these KEYS and
-- ARGV out: change the two together.)
-- Fails with unpack_first's reply (transition.lua) when a replay's job is
-- packed. Returns a flat list, two values per job in order: 1, its created_at
-- when this call created it; 1, its record (record, transition.lua) to a
-- resent call that had created it (see the nonce below); 0, its record
-- when it existed; -1, n when the queue holds n >= the cap of the tenant's
-- jobs not ended (nothing written); -2, 0 when the job was deleted
-- (nothing written: a replay does not bring it back); -3, b when the
-- tenant's jobs in the queue are charged b bytes and the job's charge
-- would take them past the quota (nothing written).
--
-- A job is charged its bytes: those of its arguments here (its input,
-- metadata, keys and the rest) and job_overhead, what its keys' names and
-- its entries in the queue's sets cost besides (stats.lua's retained
-- bytes).
local ready, scheduled, deadlines, fair, stats, tenant_index = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local tenant, maxlen, room = ARGV[1], ARGV[2], tonumber(ARGV[3])
local retained, quota = KEYS[8], tonumber(ARGV[5])
local n = (#ARGV - 5) / 17
local job_overhead = 512

local now = redis_now()
local tx = transitions(stats, nil, now, nil, maxlen)
use_day(tx, KEYS[7], ARGV[4])
local held = room and unended(stats, tenant) -- the tenant's jobs not ended, created ones included
local kept = quota and retained_bytes(retained) -- the tenant's retained bytes, created ones included
local charges, charged = {}, 0 -- id, bytes of each job created; their sum
local out, created = {}, 0 -- created: how many jobs this call created
local j = {tenant = tenant} -- every job's move's, in turn: a table a job cost 2 000 Redis instructions
local late, unlisted = {}, {} -- score, id of each replay created; fresh ids not created

-- The ids this call made up join the tenant's index first, NX: the
-- listing of the jobs created. A job is in its tenant's index from its
-- record's first write here until forget (transition.lua) takes both,
-- never before (a packed job, long ended, has only its folded key), so when
-- every one of them is new, none exists and none
-- needs an EXISTS. Only go-redis's resend of this very call, after a lost
-- reply, finds them there: it looks each up. The replays created join it
-- at the end, and the fresh ids not created leave it.
-- A replay's job may be packed since: it is unpacked first, before
-- anything here is written.
local fresh, packed_at = {}, {}
for i = 0, n - 1 do
  local k = 9 + 5 * i
  if ARGV[6 + 17 * i + 16] ~= '1' then
    fresh[#fresh + 1], fresh[#fresh + 2] = tx.now_s, ARGV[6 + 17 * i]
  elseif packed(KEYS[k + 4]) and redis.call('EXISTS', KEYS[k]) == 0 then
    packed_at[#packed_at + 1], packed_at[#packed_at + 2] = k, k + 4
  end
end
if #packed_at > 0 then
  return unpack_first(packed_at)
end
local resent = #fresh > 0 and redis.call('ZADD', tenant_index, 'NX', unpack(fresh)) < #fresh / 2
local lanes, pushed = {}, {} -- the lanes of the jobs created ready, in order; by lane, its set and jobs

-- The fields a job has only when set otherwise than their usual value
-- (transition.lua's implied, else ""): name, place in its ARGV (k), and
-- that value, looked up once a call.
local optional = {{'max_wait_ms', 8}, {'priority', 2}, {'on_busy', 9}, {'trace', 11}, {'metadata', 6},
  {'schedule', 13}, {'cost', 14}, {'webhook', 15}, {'nonce', 12}}
local usual = implied()
for _, o in ipairs(optional) do
  o[3] = usual[o[1]] or ''
end

for i = 0, n - 1 do
  local k, a = 9 + 5 * i, 6 + 17 * i
  local job, events, id, nonce, replay = KEYS[k], KEYS[k + 1], ARGV[a], ARGV[a + 12], ARGV[a + 16] == '1'
  local size = job_overhead
  for v = a, a + 16 do
    size = size + #ARGV[v]
  end
  -- A retried idempotent request and a crashed winner's successor both land
  -- here with the same id: only the first creates. A client that lost the
  -- reply and resent this very call finds its own nonce: it created the
  -- job. An item without an idempotency key has an id no other call
  -- knows, and no nonce (""): the job under it is its own.
  if (replay or resent) and redis.call('EXISTS', job) == 1 then
    local created = 0
    if (redis.call('HGET', job, 'nonce') or '') == nonce then
      created = 1
    end
    out[#out + 1], out[#out + 2] = created, record(job, KEYS[k + 4])
  elseif replay and redis.call('EXISTS', KEYS[k + 3]) == 1 then
    out[#out + 1], out[#out + 2] = -2, 0
  elseif held and held >= room then
    out[#out + 1], out[#out + 2] = -1, held
    if not replay then
      unlisted[#unlisted + 1] = id
    end
  elseif kept and kept + size > quota then
    out[#out + 1], out[#out + 2] = -3, kept
    if not replay then
      unlisted[#unlisted + 1] = id
    end
  else
    local priority, max_wait, delay = ARGV[a + 2], tonumber(ARGV[a + 8]), tonumber(ARGV[a + 10])
    -- A small hash is a listpack that Redis searches from the front: the
    -- fields claims read come first (each field HMGET reads costs a scan
    -- up to it), then those only written, and those only due work, cancels
    -- and reads use come last. The move writes state first. A field that
    -- has no value yet, or holds its usual one (attempt 0, started_at "",
    -- cancel_requested 0, and max_wait_ms, priority and on_busy unless
    -- set: transition.lua's implied), is left out, which costs a listpack
    -- a scan in full where it is read, but spares the submit's HSET (each
    -- field it adds scans those before it), its AOF record and the hash's
    -- bytes: every reader takes an absent field as "" or its usual value.
    -- So is token, read only with the execution a claim gives it, and the
    -- nonce of an item without an idempotency key.
    local fields = {'tenant', tenant, 'concurrency_keys', ARGV[a + 4], 'kind', ARGV[a + 1], 'input', ARGV[a + 5],
      'timeout_ms', ARGV[a + 7], 'max_attempts', ARGV[a + 3], 'created_at', tx.now_s}
    for _, o in ipairs(optional) do
      local v = ARGV[a + o[2]]
      if v ~= o[3] then
        fields[#fields + 1], fields[#fields + 2] = o[1], v
      end
    end
    j.key, j.events, j.id, j.state, j.states = job, events, id, '', ''
    move(tx, j, 'queued', fields, '0')

    if delay > 0 then
      redis.call('ZADD', scheduled, now + delay, id)
    else
      local lane = fair_lane(ARGV[a + 1], ARGV[a + 4])
      local p = pushed[lane]
      if not p then
        p = {set = KEYS[k + 2], ids = {}, priorities = {}}
        pushed[lane], lanes[#lanes + 1] = p, lane
      end
      p.ids[#p.ids + 1], p.priorities[#p.priorities + 1] = id, priority
    end
    -- max_wait counts from when the job may first run, so a delay does not eat it.
    if max_wait > 0 then
      redis.call('ZADD', deadlines, now + delay + max_wait, id)
    end
    if replay then
      late[#late + 1], late[#late + 2] = tx.now_s, id
    end
    created = created + 1
    if held then
      held = held + 1
    end
    if kept then
      kept = kept + size
    end
    charges[#charges + 1], charges[#charges + 2], charged = id, size, charged + size
    -- The caller knows the new job's record from what it sent (submitCall
    -- in internal/store/job_calls.go): only the clock is new to it.
    out[#out + 1], out[#out + 2] = 1, tx.now_s
  end
end
-- Each lane's jobs wait in it in the order they came, pushed at once; the
-- lanes take their turns in the order of their first job.
for _, lane in ipairs(lanes) do
  local p = pushed[lane]
  fair_push_all(fair, ready, p.set, lane, p.ids, p.priorities, now)
end
if #late > 0 then
  redis.call('ZADD', tenant_index, unpack(late))
end
if created > 0 then
  use(tx, tenant, 'jobs_submitted', created)
  charge(retained, charges, charged)
end
if #unlisted > 0 then
  redis.call('ZREM', tenant_index, unpack(unlisted))
end
settle(tx)

return out
