-- Fair queueing across lanes, shared by the scripts that move jobs in and
-- out of the ready set (Load prepends it). A lane is one tenant's jobs of
-- one kind with one set of concurrency keys: its name is the kind, then
-- the job's concurrency_keys array, which always names its tenant
-- (fair_lane). The kind is part of it so that a worker passes over the
-- lanes of kinds it does not serve by their names alone, and no job waits
-- behind one of another kind that no worker takes.
--
-- Each lane keeps its waiting jobs in a sorted set of its own (score
-- (100 - priority) * 2^43 + the Redis clock in ms when it joined, ties by
-- id: priority, then FIFO), and the ready set
-- holds the lanes (member: the lane), each scored by its virtual start. A
-- lane takes the next turn of the queue's virtual clock (clock + 1) when it
-- starts afresh and after each claim of its head, and each claim moves the
-- clock to the turn it took. So waiting lanes take turns, one job each,
-- however deep one lane's backlog and whatever its priorities: priority
-- orders a lane's own jobs, never one tenant's ahead of another's turn.
-- A lane whose keys are full
-- holds one place in the ready set, not one per job, so it never hides
-- the lanes behind it from a claim's bounded look.
--
-- A tenant's lanes share one turn: a lane of a tenant with n lanes in the
-- ready set takes its next turn n after the one it took (it starts at the
-- clock's n-th turn), so however many lanes one tenant opens, its lanes
-- together take one turn of the clock as another tenant's one lane does,
-- and they stand in a claim's bounded look no more than that tenant's
-- share of it.
--
-- The fair hash holds the clock, per lane with jobs waiting the count
-- of them (field '#' .. lane), which GET /v1/limits sums into each key's
-- "waiting", and per tenant with lanes in the ready set the count of them
-- (field '@' .. tenant).
-- 2^43 per band keeps every score an exact integer in a double
-- (201 * 2^43 < 2^53), and holds the clock in ms until the year 2248.
-- Jobs that join a lane in one ms share a score, and a sorted set orders
-- those by member: ids made in one process are in order (internal/jobid),
-- so a batch's jobs wait in its order without a counter to write. (Lanes
-- written by a version before, scored by an arrival counter, keep their
-- jobs ahead of those scored by the clock: they came first.)
local FAIR_BAND = 8796093022208

local function fair_int(x) return string.format('%d', x) end -- as transition.lua's int

-- fair_lane is the lane of a job of kind whose concurrency_keys (a JSON
-- array) are keys. scripts.Lane in Go is the same.
local function fair_lane(kind, keys) return kind .. keys end

-- fair_kind is the kind of lane's jobs: the name up to its keys.
local function fair_kind(lane) return string.match(lane, '^[^%[]*') end

-- fair_start is the virtual start a ready score holds. Scores written
-- before priority left the ready set carry a priority band above it:
-- FAIR_BAND is a power of two, so the division in Lua's % is exact.
local function fair_start(score) return score % FAIR_BAND end

local function fair_clock(fair) return tonumber(redis.call('HGET', fair, 'clock') or '0') end

-- fair_tenant is the tenant of lane: its jobs' concurrency keys always
-- name tenant:<tenant>, and no other tenant's key (job/submission.go).
local function fair_tenant(lane) return string.match(lane, '"tenant:([%w_.-]+)"') or '' end

-- fair_lanes is how many lanes lane's tenant has in the ready set.
local function fair_lanes(fair, lane)
  return tonumber(redis.call('HGET', fair, '@' .. fair_tenant(lane)) or '0')
end

-- fair_count counts a lane that joined (by 1) or left (by -1) the ready
-- set against its tenant's lanes.
local function fair_count(fair, lane, by)
  local field = '@' .. fair_tenant(lane)
  if redis.call('HINCRBY', fair, field, by) <= 0 then
    redis.call('HDEL', fair, field)
  end
end

-- fair_place puts lane in the ready set at its turn start; an empty lane
-- leaves the ready set.
local function fair_place(fair, ready, set, lane, start)
  if redis.call('ZCARD', set) > 0 then
    if redis.call('ZADD', ready, fair_int(start), lane) == 1 then
      fair_count(fair, lane, 1)
    end
  elseif redis.call('ZREM', ready, lane) == 1 then
    fair_count(fair, lane, -1)
  end
end

-- fair_push_all makes jobs ids (of priorities, one each) wait in lane,
-- whose sorted set is set, from now (the Redis clock in ms), in order:
-- what fair_push does for each, in a few commands for all. A lane already
-- waiting keeps its turn; a new one takes its tenant's next turn: the
-- clock's next after as many turns as the tenant has lanes waiting.
local function fair_push_all(fair, ready, set, lane, ids, priorities, now)
  local members = {}
  for i, id in ipairs(ids) do
    members[2 * i - 1] = fair_int((100 - tonumber(priorities[i])) * FAIR_BAND + now)
    members[2 * i] = id
  end
  redis.call('ZADD', set, unpack(members))
  -- A lane with jobs holds a turn in the ready set already: only one that
  -- had none, as its count says, is placed, at its tenant's next turn.
  if redis.call('HINCRBY', fair, '#' .. lane, #ids) == #ids and
    redis.call('ZADD', ready, 'NX', fair_int(fair_clock(fair) + fair_lanes(fair, lane) + 1), lane) == 1 then
    fair_count(fair, lane, 1)
  end
end

-- fair_push makes job id (of priority) wait in lane from now (see
-- fair_push_all).
local function fair_push(fair, ready, set, lane, id, priority, now)
  fair_push_all(fair, ready, set, lane, {id}, {priority}, now)
end

-- fair_remove takes job id out of lane (claimed, cancelled, expired): the
-- lane moves to turn start, or keeps its turn when start is nil. It
-- returns whether id was waiting in the lane.
local function fair_remove(fair, ready, set, lane, id, start)
  if redis.call('ZREM', set, id) == 0 then
    return false
  end
  if redis.call('HINCRBY', fair, '#' .. lane, -1) <= 0 then
    redis.call('HDEL', fair, '#' .. lane)
  end
  if not start then
    local turn = redis.call('ZSCORE', ready, lane)
    start = turn and fair_start(tonumber(turn)) or fair_clock(fair) + 1
  end
  fair_place(fair, ready, set, lane, start)
  return true
end

-- fair_take takes the claimed ids, the first jobs of lane, out of it in one
-- step, and places the lane at its next turn start.
local function fair_take(fair, ready, set, lane, ids, start)
  redis.call('ZREM', set, unpack(ids))
  if redis.call('HINCRBY', fair, '#' .. lane, -#ids) <= 0 then
    redis.call('HDEL', fair, '#' .. lane)
  end
  fair_place(fair, ready, set, lane, start)
end
