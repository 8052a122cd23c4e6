-- Fair queueing across lanes, shared by the scripts that make a job ready
-- (Load prepends it). A lane is one tenant's jobs with one set of
-- concurrency keys: the job's concurrency_keys array, which always names
-- its tenant. This is start-time fair queueing: a job's virtual start is one
-- past the later of its lane's previous one and the queue's virtual clock,
-- and each claim moves the clock to the virtual start of the jobs it takes.
-- The ready score is (100 - priority) * 2^43 + virtual start: a higher
-- priority always goes first, and within a priority the backlogged lanes
-- take turns, one job each, however deep any one lane's backlog is.
-- The hash holds the clock, and for each lane with jobs in the ready set
-- its last virtual start (field: the lane) and how many it has there
-- (field: '#' .. lane), which is what GET /v1/limits sums into each key's
-- "waiting". Both go when the count reaches 0.
-- 2^43 virtual starts per band keep every score an exact integer in a
-- double (201 * 2^43 < 2^53).
local FAIR_BAND = 8796093022208

local function fair_int(x) return string.format('%.0f', x) end

-- fair_enqueue makes job id ready in its lane.
local function fair_enqueue(fair, ready, id, priority, lane)
  local f = redis.call('HMGET', fair, 'clock', lane)
  local start = math.max(tonumber(f[1] or '0'), tonumber(f[2] or '0')) + 1
  redis.call('HSET', fair, lane, fair_int(start))
  redis.call('HINCRBY', fair, '#' .. lane, 1)
  redis.call('ZADD', ready, fair_int((100 - tonumber(priority)) * FAIR_BAND + start), id)
end

-- fair_leave counts a job of lane out of the ready set (claimed, cancelled,
-- expired); the caller removed it, and calls this only if it was there.
local function fair_leave(fair, lane)
  if redis.call('HINCRBY', fair, '#' .. lane, -1) <= 0 then
    redis.call('HDEL', fair, lane, '#' .. lane)
  end
end

-- fair_start is the virtual start inside a ready score. FAIR_BAND is a
-- power of two, so the division in Lua's % is exact.
local function fair_start(score) return score % FAIR_BAND end
