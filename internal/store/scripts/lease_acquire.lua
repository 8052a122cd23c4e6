-- Takes slots of one lease key for holders, in order, while the key has
-- room: the one acquire of every path (lease.Acquire, Semaphore.Do, and a
-- worker's claim, which asks for a batch of jobs at once).
-- KEYS[1] lease set (member: holder, score: expiry in ms on the Redis clock)
-- KEYS[2] fencing-token counter of the lease key (fence.lua)
-- KEYS[3] the Wait line's ticket expiries   KEYS[4] whose turn it is
-- KEYS[5] mark: this side waits
-- KEYS[6] window, KEYS[7] spent, KEYS[8] throttle, KEYS[9] adapt: the key's
--   budgets (budget.lua), touched only when ARGV[4..6] give it one
-- ARGV[1] ttl_ms   ARGV[2] limit (-1: none, every holder gets a slot)
-- ARGV[3] how long (ms) a refusal marks this side as waiting
-- ARGV[4] rpm (-1: none)   ARGV[5] tpm (-1: none)   ARGV[6] "1" when adaptive
-- ARGV[7..] holders, each followed by its estimated tokens when tpm >= 0
-- Returns {retry_after_ms, expires_at_ms, waiters, by_budget, then for each
-- holder its token, or 0 when the set had no room for it}. retry_after_ms
-- is the time until the budget has room, when it refused (the throttle
-- ends, the window frees, the ramp after a throttle opens a slot), else
-- until the earliest lease expires (0 when every holder got a slot); waiters is 1 when tickets wait in line for the key (a release
-- should wake them); by_budget is 1 when the key's budget refused a holder
-- its limit had room for (throttled, rpm or tpm full, or the effective
-- limit reached).
--
-- A holder already in the set (a retry after a lost reply) keeps its one
-- slot and its reservation, its expiry moved, and is issued a new token.
--
-- A key with a budget grants a holder a slot only if the budget has room
-- too, checked and reserved in this one step: the key is not throttled;
-- fewer than rpm executions started in the last minute; the tokens of the
-- last minute plus the holder's estimate (clamped to [0, tpm]: a job larger
-- than the whole budget runs alone) fit in tpm; and, for an adaptive key, fewer
-- holders than its effective limit. The reservation is the holder's entry
-- in the window (and its tokens in spent), settled or given back by
-- lease_settle.lua.
--
-- Two sides meet on a full key: these callers, which try and come back
-- (queued jobs, Acquire), and the tickets of Wait's line
-- (semaphore_poll.lua). While both wait, free slots alternate between them:
-- after this side takes one, turn says the next is the line's, and the
-- line's grant gives it back. A refusal leaves a mark (KEYS[5]) that says
-- this side waits, for ARGV[3] ms: callers come back sooner than that.
local leases, fence, tickets, turn, waiting = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local window, spent, throttle, adapt = KEYS[6], KEYS[7], KEYS[8], KEYS[9]
local ttl, limit, mark = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3]
local rpm, tpm, adaptive = tonumber(ARGV[4]), tonumber(ARGV[5]), ARGV[6] == '1'
local budgeted = rpm >= 0 or tpm >= 0 or adaptive
local step = tpm >= 0 and 2 or 1

local now_us = clock_us()
local now = math.floor(now_us / 1000)

-- Reap lazily: whoever acquires cleans up after the dead.
redis.call('ZREMRANGEBYSCORE', leases, '-inf', now)
local line = redis.call('ZCOUNT', tickets, '(' .. now, '+inf') > 0
local lines_turn = line and redis.call('GET', turn) == 'line'

-- now is truncated to the millisecond: round the expiry up, so the lease
-- never ends before the holder's trust window (sent + ttl) does.
local expires = string.format('%d', now + 1 + ttl)
local out = {0, expires, line and 1 or 0, 0}
local add, took, refused = {}, false, false
-- budget_wait is how long until the budget frees room, when it refused.
local budget_wait = nil
-- ramp_wait is how long until the ramp after a throttle opens a slot more.
local ramp_wait = nil
if limit < 0 and not budgeted then
  -- Every holder gets a slot (one already in the set keeps it): nothing
  -- to count or look up. Every job's claim asks its tenant's key, seldom
  -- limited.
  for i = 7, #ARGV do
    add[#add + 1] = expires
    add[#add + 1] = ARGV[i]
    out[#out + 1] = true
  end
  took = #add > 0
else
  local held = redis.call('ZCARD', leases)
  local requests, tokens, until_ms, reserve = 0, 0, 0, {}
  local cap = limit -- an adaptive key's limit before its effective limit
  if budgeted then
    budget_reap(window, spent, now, tpm)
    requests = redis.call('ZCARD', window)
    tokens = tonumber(redis.call('HGET', spent, '#')) or 0
    until_ms = tonumber(redis.call('GET', throttle)) or 0
    if adaptive then
      cap = cap_of(limit)
      local a = adapt_read(adapt, cap)
      limit = math.min(cap, adapt_limit(a, now))
      -- Reopening over the ramp after a throttle: the next slot opens
      -- within a ramp's share of one.
      if now < a.thr + ramp then ramp_wait = math.max(1, math.ceil(ramp / math.max(1, a.eff))) end
    end
  end
  for i = 7, #ARGV, step do
    local holder = ARGV[i]
    local ok = redis.call('ZSCORE', leases, holder)
    if not ok and held < limit or not ok and limit < 0 then
      local est = 0
      if tpm >= 0 then est = math.max(0, math.min(tonumber(ARGV[i + 1]) or 0, tpm)) end
      if not budgeted then
        ok = not lines_turn
      elseif until_ms > now then
        budget_wait = until_ms - now
        out[4] = 1
      elseif rpm >= 0 and requests >= rpm or tpm >= 0 and tokens + est > tpm then
        local first = redis.call('ZRANGE', window, 0, 0, 'WITHSCORES')
        budget_wait = first[2] and math.max(1, tonumber(first[2]) + minute - now) or 1000
        out[4] = 1
      else
        ok = not lines_turn
        if ok then
          requests, tokens = requests + 1, tokens + est
          reserve[#reserve + 1] = {holder, est}
        end
      end
      if ok then
        held = held + 1
        took = true
        lines_turn = line -- one slot for this side, then the line's turn
      end
    elseif not ok and held < cap then
      out[4] = 1 -- the effective limit refused it
      budget_wait = budget_wait or ramp_wait
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
  if #reserve > 0 then
    local starts, sums = {}, {}
    for _, r in ipairs(reserve) do
      starts[#starts + 1], starts[#starts + 2] = now, r[1]
      sums[#sums + 1], sums[#sums + 2] = r[1], r[2]
    end
    redis.call('ZADD', window, unpack(starts))
    redis.call('PEXPIRE', window, minute + ttl)
    if tpm >= 0 then
      sums[#sums + 1], sums[#sums + 2] = '#', tokens
      redis.call('HSET', spent, unpack(sums))
      redis.call('PEXPIRE', spent, minute + ttl)
    end
  end
end

if #add > 0 then
  redis.call('ZADD', leases, unpack(add))
  -- The set outlives its longest lease, then vanishes: it expires at the
  -- latest lease's own expiry, on the same clock. PEXPIRETIME is -1 with
  -- no expiry yet.
  if redis.call('PEXPIRETIME', leases) < tonumber(expires) then
    redis.call('PEXPIREAT', leases, expires)
  end
  -- The counter may go once unused: a second after its last token, the
  -- clock's floor (fence_take) is above every token it issued, unless it
  -- issued more than a million in that second. So no key a tenant's jobs
  -- name outlives its use (a tenant may name any key under its own prefix).
  local token = fence_take(fence, #add / 2, now_us, ttl + 1000)
  for i = 5, #out do
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
  for i = 5, #out do
    out[i] = 0
  end
end

if refused then
  redis.call('SET', waiting, '1', 'PX', mark)
  local earliest = redis.call('ZRANGE', leases, 0, 0, 'WITHSCORES')
  out[1] = budget_wait or earliest[2] and math.max(1, tonumber(earliest[2]) - now) or 1000 -- a limit of 0 has no lease to wait for
end
return out
