-- Fair queueing across lanes, shared by the scripts that move jobs in and
-- out of the ready set (Load prepends it). A lane is one tenant's jobs with
-- one set of concurrency keys: the job's concurrency_keys array, which
-- always names its tenant.
--
-- Each lane keeps its waiting jobs in a sorted set of its own (score
-- (100 - priority) * 2^43 + arrival: priority, then FIFO), and the ready set
-- holds only each lane's head, scored (100 - priority) * 2^43 + virtual
-- start. A lane's head takes the next turn of the queue's virtual clock
-- (clock + 1) when the lane gets a new head after a claim or starts afresh,
-- and each claim moves the clock to the start it took. So, within a
-- priority, waiting lanes take turns, one job each, however deep one lane's
-- backlog; and a lane whose keys are full holds one place at the head of
-- the ready set, not one per job, so it never hides the lanes behind it
-- from a claim's bounded look.
--
-- The fair hash holds the clock, the arrival counter, and per lane with jobs
-- waiting the count of them (field '#' .. lane), which GET /v1/limits sums
-- into each key's "waiting".
-- 2^43 per band keeps every score an exact integer in a double
-- (201 * 2^43 < 2^53).
local FAIR_BAND = 8796093022208

local function fair_int(x) return string.format('%.0f', x) end

-- fair_start is the virtual start inside a ready score. FAIR_BAND is a
-- power of two, so the division in Lua's % is exact.
local function fair_start(score) return score % FAIR_BAND end

local function fair_band(score) return math.floor(score / FAIR_BAND) end

-- fair_push makes job id (of priority) wait in lane, whose sorted set is
-- set. It becomes the lane's head if it goes first there: at the old head's
-- turn, or at the clock's next turn when the lane was empty.
local function fair_push(fair, ready, set, lane, id, priority)
  local band = 100 - tonumber(priority)
  local arrival = redis.call('HINCRBY', fair, 'arrival', 1)
  redis.call('ZADD', set, fair_int(band * FAIR_BAND + arrival), id)
  redis.call('HINCRBY', fair, '#' .. lane, 1)
  local head = redis.call('ZRANGE', set, 0, 1)
  if head[1] ~= id then
    return -- behind the lane's head: it waits its turn in the lane
  end
  local start
  local old = head[2] and redis.call('ZSCORE', ready, head[2])
  if old then
    start = fair_start(tonumber(old))
    redis.call('ZREM', ready, head[2])
  else
    start = tonumber(redis.call('HGET', fair, 'clock') or '0') + 1
  end
  redis.call('ZADD', ready, fair_int(band * FAIR_BAND + start), id)
end

-- fair_remove takes job id out of lane (claimed, cancelled, expired). When
-- it was the head, the lane's next job becomes head at start, or at the
-- removed head's own turn when start is nil. It returns whether id was
-- waiting in the lane.
local function fair_remove(fair, ready, set, lane, id, start)
  if redis.call('ZREM', set, id) == 0 then
    return false
  end
  if redis.call('HINCRBY', fair, '#' .. lane, -1) <= 0 then
    redis.call('HDEL', fair, '#' .. lane)
  end
  local old = redis.call('ZSCORE', ready, id)
  if not old then
    return true
  end
  redis.call('ZREM', ready, id)
  start = start or fair_start(tonumber(old))
  local next = redis.call('ZRANGE', set, 0, 0, 'WITHSCORES')
  if next[1] then
    redis.call('ZADD', ready, fair_int(fair_band(tonumber(next[2])) * FAIR_BAND + start), next[1])
  end
  return true
end
