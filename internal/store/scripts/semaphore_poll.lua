-- KEYS[1] ticket queue (member: ticket, score: arrival sequence)
-- KEYS[2] ticket expiries (member: ticket, score: expiry in ms on the Redis clock)
-- KEYS[3] arrival sequence counter
-- KEYS[4] this ticket's state: PENDING, GRANTED, CANCELLED or TIMED_OUT
-- KEYS[5] lease set   KEYS[6] fencing-token counter of the lease key (fence.lua)
-- KEYS[7] whose turn it is   KEYS[8] mark: the other side waits
-- (lease_acquire.lua, which shares both)
-- KEYS[9] window, KEYS[10] spent, KEYS[11] throttle, KEYS[12] adapt: the
--   key's budgets (budget.lua), touched only when ARGV[7..9] give it one
-- ARGV[1] ticket   ARGV[2] ticket_ttl_ms   ARGV[3] join (1: enqueue a new ticket)
-- ARGV[4] holder   ARGV[5] lease ttl_ms    ARGV[6] limit (-1: none)
-- ARGV[7] rpm (-1: none)   ARGV[8] tpm (-1: none)   ARGV[9] "1" when adaptive
-- ARGV[10] the holder's estimated tokens, for tpm
-- ARGV[11] grant ("1": take the slot when this ticket heads the line and
--   the key has room; "0": only say so, the caller first takes what else
--   it needs)
-- ARGV[12] back ("1": go to the back of the line before anything else)
-- Returns
--   {0, ahead, wait_ms}          PENDING: heartbeat done, ahead tickets before
--                                it; at the head (ahead 0), wait_ms is the
--                                time until the key may have room, 0 when it
--                                has room now (and grant was "0")
--   {1, token, expires_at, more} GRANTED (PENDING → GRANTED, or a retry of it);
--                                more = 1 when others wait and slots are free
--   {2}                          lost: the ticket expired and was reaped
--   {3} / {4}                    already CANCELLED / TIMED_OUT
-- One call joins (with join = 1), heartbeats the ticket, reaps dead tickets
-- and grants the ticket a slot if it heads the line.
-- While callers of lease_acquire.lua wait too (KEYS[8]), free slots
-- alternate between them and the line: the line takes one, then theirs is
-- the next (KEYS[7]).
-- A key with a budget grants the head a slot only if the budget has room
-- too, checked and reserved in the same step as lease_acquire.lua does for
-- one holder; the reservation is settled by lease_settle.lua.
-- Complexity: O(log N) in the line's length N, plus O(R log N) to reap at
-- most R = 16 expired tickets; the line is never scanned.
local queue, tickets, seq, state, leases, fence = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local turn, others = KEYS[7], KEYS[8]
local ticket, ticket_ttl, join = ARGV[1], tonumber(ARGV[2]), ARGV[3] == '1'
local holder, ttl, limit = ARGV[4], tonumber(ARGV[5]), tonumber(ARGV[6])
local window, spent, throttle, adapt = KEYS[9], KEYS[10], KEYS[11], KEYS[12]
local rpm, tpm, adaptive = tonumber(ARGV[7]), tonumber(ARGV[8]), ARGV[9] == '1'
local est, may_grant, back = tonumber(ARGV[10]), ARGV[11] == '1', ARGV[12] == '1'
local budgeted = rpm >= 0 or tpm >= 0 or adaptive

local now_us = clock_us()
local now = math.floor(now_us / 1000)

-- The line and its counter outlive their last live ticket, then vanish.
local function keep_alive(key)
  if redis.call('PTTL', key) < ticket_ttl then
    redis.call('PEXPIRE', key, ticket_ttl)
  end
end

-- Moves the lease's expiry to a TTL from now, as lease_acquire.lua does.
local function grant()
  local expires = now + 1 + ttl
  redis.call('ZADD', leases, expires, holder)
  if redis.call('PEXPIRETIME', leases) < expires then
    redis.call('PEXPIREAT', leases, expires)
  end
  return fence_take(fence, 1, now_us) + 1, expires
end

local s = redis.call('GET', state)
if not s then
  if not join then
    redis.call('ZREM', queue, ticket)
    redis.call('ZREM', tickets, ticket)
    return {2}
  end
  redis.call('ZADD', queue, redis.call('INCR', seq), ticket)
  s = 'PENDING'
elseif s == 'GRANTED' then
  -- A retry after a lost reply: hand the same slot over again, renewed so
  -- that the caller's new trust window ends before the lease does.
  local score = redis.call('ZSCORE', leases, holder)
  if not score or tonumber(score) <= now then
    return {2}
  end
  local token, expires = grant()
  return {1, token, expires, 0}
elseif s == 'CANCELLED' then
  return {3}
elseif s == 'TIMED_OUT' then
  return {4}
elseif not redis.call('ZSCORE', queue, ticket) then
  -- PENDING, but reaped a moment before its state expired.
  redis.call('DEL', state)
  redis.call('ZREM', tickets, ticket)
  return {2}
end

if back then
  redis.call('ZADD', queue, redis.call('INCR', seq), ticket)
end

-- Heartbeat.
redis.call('ZADD', tickets, now + ticket_ttl, ticket)
redis.call('SET', state, s, 'PX', ticket_ttl)
keep_alive(queue)
keep_alive(tickets)
keep_alive(seq)

-- Reap dead waiters: their tickets expired without a heartbeat.
local dead = redis.call('ZRANGEBYSCORE', tickets, '-inf', now, 'LIMIT', 0, 16)
for _, d in ipairs(dead) do
  redis.call('ZREM', queue, d)
  redis.call('ZREM', tickets, d)
end

local ahead = redis.call('ZRANK', queue, ticket)
if ahead > 0 then
  return {0, ahead, 0}
end
redis.call('ZREMRANGEBYSCORE', leases, '-inf', now)
local held = redis.call('ZCARD', leases)
local others_wait = redis.call('EXISTS', others) == 1
local holding = redis.call('ZSCORE', leases, holder)
local tokens = 0
if not holding then
  if limit >= 0 and held >= limit then
    local earliest = redis.call('ZRANGE', leases, 0, 0, 'WITHSCORES')
    return {0, 0, earliest[2] and math.max(1, tonumber(earliest[2]) - now) or 1000}
  end
  if others_wait and redis.call('GET', turn) == 'jobs' then
    return {0, 0, 1}
  end
  if budgeted then
    -- The budget's room, as lease_acquire.lua checks it for one holder.
    budget_reap(window, spent, now, tpm)
    local until_ms = tonumber(redis.call('GET', throttle)) or 0
    if until_ms > now then
      return {0, 0, until_ms - now}
    end
    if adaptive and held >= adapt_limit(adapt_read(adapt, cap_of(limit)), now) then
      return {0, 0, ramp}
    end
    est = math.max(0, math.min(est, tpm))
    tokens = tonumber(redis.call('HGET', spent, '#')) or 0
    if rpm >= 0 and redis.call('ZCARD', window) >= rpm or tpm >= 0 and tokens + est > tpm then
      local first = redis.call('ZRANGE', window, 0, 0, 'WITHSCORES')
      return {0, 0, first[2] and math.max(1, tonumber(first[2]) + minute - now) or 1000}
    end
  end
end
if not may_grant then
  return {0, 0, 0}
end
if not holding then
  if budgeted then
    redis.call('ZADD', window, now, holder)
    redis.call('PEXPIRE', window, minute + ttl)
    if tpm >= 0 then
      redis.call('HSET', spent, holder, est, '#', tokens + est)
      redis.call('PEXPIRE', spent, minute + ttl)
    end
  end
  held = held + 1
end
if others_wait then
  redis.call('SET', turn, 'jobs', 'PX', ttl)
else
  redis.call('DEL', turn)
end

-- PENDING → GRANTED.
redis.call('ZREM', queue, ticket)
redis.call('ZREM', tickets, ticket)
redis.call('SET', state, 'GRANTED', 'PX', ticket_ttl)
local token, expires = grant()
local more = 0
if (limit < 0 or held < limit) and redis.call('ZCARD', queue) > 0 then
  more = 1
end
return {1, token, expires, more}
