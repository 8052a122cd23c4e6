-- Takes slots of one lease key for holders, in order, while the key has
-- room: the one acquire of every path (lease.Acquire, Semaphore.Do, and a
-- worker's claim, which asks for a batch of jobs at once).
-- KEYS[1] lease set (member: holder, score: expiry in ms on the Redis clock)
-- KEYS[2] fencing-token counter of the lease key (fence.lua)
-- KEYS[3] the Wait line's ticket expiries   KEYS[4] whose turn it is
-- KEYS[5] mark: this side waits
-- ARGV[1] ttl_ms   ARGV[2] limit (-1: none, every holder gets a slot)
-- ARGV[3] how long (ms) a refusal marks this side as waiting
-- ARGV[4..] holders
-- Returns {retry_after_ms, expires_at_ms, waiters, then for each holder its
-- token, or 0 when the set had no room for it}. retry_after_ms is the time
-- until the earliest lease expires (0 when every holder got a slot);
-- waiters is 1 when tickets wait in line for the key (a release should
-- wake them).
--
-- A holder already in the set (a retry after a lost reply) keeps its one
-- slot, its expiry moved, and is issued a new token.
--
-- Two sides meet on a full key: these callers, which try and come back
-- (queued jobs, Acquire), and the tickets of Wait's line
-- (semaphore_poll.lua). While both wait, free slots alternate between them:
-- after this side takes one, turn says the next is the line's, and the
-- line's grant gives it back. A refusal leaves a mark (KEYS[5]) that says
-- this side waits, for ARGV[3] ms: callers come back sooner than that.
local leases, fence, tickets, turn, waiting = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local ttl, limit, mark = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3]

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

-- Reap lazily: whoever acquires cleans up after the dead.
redis.call('ZREMRANGEBYSCORE', leases, '-inf', now)
local line = redis.call('ZCOUNT', tickets, '(' .. now, '+inf') > 0
local lines_turn = line and redis.call('GET', turn) == 'line'

-- now is truncated to the millisecond: round the expiry up, so the lease
-- never ends before the holder's trust window (sent + ttl) does.
local expires = string.format('%.0f', now + 1 + ttl)
local out = {0, expires, line and 1 or 0}
local add, took, refused = {}, false, false
if limit < 0 then
  -- Every holder gets a slot (one already in the set keeps it): nothing
  -- to count or look up. Every job's claim asks its tenant's key, seldom
  -- limited.
  for i = 4, #ARGV do
    add[#add + 1] = expires
    add[#add + 1] = ARGV[i]
    out[#out + 1] = true
  end
  took = #add > 0
else
  local held = redis.call('ZCARD', leases)
  for i = 4, #ARGV do
    local holder = ARGV[i]
    local ok = redis.call('ZSCORE', leases, holder)
    if not ok and held < limit and not lines_turn then
      held = held + 1
      ok, took = true, true
      lines_turn = line -- one slot for this side, then the line's turn
    end
    if ok then
      add[#add + 1] = expires
      add[#add + 1] = holder
      out[#out + 1] = true
    else
      out[#out + 1] = false
      refused = true
    end
  end
end

if #add > 0 then
  redis.call('ZADD', leases, unpack(add))
  -- The set outlives its longest lease, then vanishes: it expires at the
  -- latest lease's own expiry, on the same clock. PEXPIRETIME is -1 with
  -- no expiry yet. The counter never expires, so tokens never go back.
  if redis.call('PEXPIRETIME', leases) < tonumber(expires) then
    redis.call('PEXPIREAT', leases, expires)
  end
  local token = fence_take(fence, #add / 2)
  for i = 4, #out do
    if out[i] then
      token = token + 1
      out[i] = token
    else
      out[i] = 0
    end
  end
  if took and line then
    redis.call('SET', turn, 'line', 'PX', ttl)
  end
else
  for i = 4, #out do
    out[i] = 0
  end
end

if refused then
  redis.call('SET', waiting, '1', 'PX', mark)
  local earliest = redis.call('ZRANGE', leases, 0, 0, 'WITHSCORES')
  out[1] = earliest[2] and math.max(1, tonumber(earliest[2]) - now) or 1000 -- a limit of 0 has no lease to wait for
end
return out
