-- Ends holders' slots of one lease key that has a budget (budget.lua), and
-- settles what each reserved: the release of a budgeted key. A key
-- without one is released with a plain ZREM.
-- KEYS[1] lease set   KEYS[2] window   KEYS[3] spent   KEYS[4] throttle
-- KEYS[5] adapt   KEYS[6] the mark that claims were refused a slot lately
-- (lease_acquire.lua)   KEYS[7] history (an adaptive key's last hour)
-- ARGV[1] limit (-1: none)   ARGV[2] tpm (-1: none)   ARGV[3] "1" when adaptive
-- ARGV[4..] for each holder five values: holder; how it ended: "ok" (the
--   upstream served it), "pushback" (the upstream refused it for
--   capacity), "unused" (its claim gave the slot back unrun) or "other";
--   its actual tokens (-1: not known, the estimate stands); its estimate;
--   and, for a pushback, how long (ms) the upstream asked to be left alone
--   (0: it did not say)
-- Returns the key's effective limit after the batch (0 when not adaptive).
--
-- Settling is idempotent: a holder's tokens are replaced by its actual
-- ones, so a finish resent after a lost reply changes nothing more; an
-- unused reservation leaves the window; a used one stays, counted, until
-- the window forgets it (an execution lost to a crash keeps its estimate).
-- A holder whose entry the window already forgot (it ran past a minute)
-- adds what it spent over its estimate, as an entry of its own, now.
--
-- The effective limit of an adaptive key follows the upstream (see
-- docs/architecture.md, "Adaptive limits"). A success while the limit is
-- in use grows it: by 0.4 of a slot (x1.4 a round) until the first pushback,
-- the slow start; after, by a slot a round, except just below the level
-- of the last pushback, where it waits out a hold first; a success with
-- the limit full at that level forgets it, and the slow start resumes. A pushback cuts it to the holders still in
-- flight (the upstream refused one more than those), and one below its
-- value if the refused holder started after the last cut: fresh news. A
-- fresh cut at the same level as the last one doubles the hold (1 s, then
-- up to 16 s), so a steady capacity is probed ever more rarely; and a
-- Retry-After throttles the key until it passes.
local leases, window, spent, throttle, adapt, waiting = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local limit, tpm, adaptive = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3] == '1'

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local holders = {}
for i = 4, #ARGV, 5 do holders[#holders + 1] = ARGV[i] end
redis.call('ZREM', leases, unpack(holders))
budget_reap(window, spent, now, tpm)

local cap = cap_of(limit)
local a = adaptive and adapt_read(adapt, cap)
local changed = false
for i = 4, #ARGV, 5 do
  local holder, how, actual, est, wait = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2]), tonumber(ARGV[i + 3]), tonumber(ARGV[i + 4])
  -- When it started, from the window: read only where it counts (a
  -- success that reports no tokens, the most common end, needs none).
  local started = (how == 'unused' or tpm >= 0 and actual >= 0 or a and how == 'pushback') and
    tonumber(redis.call('ZSCORE', window, holder))
  if how == 'unused' then
    if started then
      redis.call('ZREM', window, holder)
      if tpm >= 0 then
        redis.call('HINCRBY', spent, '#', -(tonumber(redis.call('HGET', spent, holder)) or 0))
        redis.call('HDEL', spent, holder)
      end
    end
  elseif tpm >= 0 and actual >= 0 then
    local extra = holder .. '+'
    if started then
      local old = tonumber(redis.call('HGET', spent, holder)) or 0
      redis.call('HSET', spent, holder, actual)
      redis.call('HINCRBY', spent, '#', actual - old)
    elseif actual > est and not redis.call('ZSCORE', window, extra) then
      redis.call('ZADD', window, now, extra)
      redis.call('HSET', spent, extra, actual - est)
      redis.call('HINCRBY', spent, '#', actual - est)
      redis.call('PEXPIRE', window, minute)
      redis.call('PEXPIRE', spent, minute)
    end
  end
  if a and how == 'ok' and (redis.call('EXISTS', waiting) == 1 or
      redis.call('ZCOUNT', leases, '(' .. now, '+inf') + 1 >= math.floor(a.eff)) then
    -- Only a success under a limit in use says it may grow (claims were
    -- refused lately, or it ran with the limit full): one that ran with
    -- slots to spare tells nothing of the upstream's capacity.
    if a.cut == 0 or a.ceil > cap then
      -- No pushback's level above: the slow start, until the first
      -- pushback, and again once growing past the last one's level
      -- (the capacity rose, by how much nobody knows): x1.4 a round.
      a.eff = a.eff + 0.4
    elseif a.eff + 1 < a.ceil or now >= a.untl then
      -- A success with the limit full at the last pushback's level: the
      -- capacity grew. (Reaching the level is only the probe, which a
      -- steady capacity refuses: growing x1.4 from there would flood a
      -- steady upstream.)
      if a.eff >= a.ceil then
        a.ceil, a.hold = cap + 1, 0
      end
      a.eff = a.eff + 1 / a.eff -- a slot a round
    end
    a.eff = math.min(a.eff, cap)
    changed = true
  elseif a and how == 'pushback' then
    local others = redis.call('ZCOUNT', leases, '(' .. now, '+inf')
    local fresh = (started or now) >= a.cut
    local eff = math.max(1, math.min(a.eff - (fresh and 1 or 0), others))
    if fresh then
      if math.abs(a.ceil - (eff + 1)) < 1 and now - a.cut < minute then
        a.hold = math.min(math.max(a.hold * 2, 1000), 16000)
      else
        a.hold = 1000
      end
      a.untl, a.cut = now + a.hold, now
    end
    a.eff, a.ceil = eff, eff + 1
    changed = true
  end
  if adaptive and how == 'pushback' and wait > 0 then
    local until_ms = now + wait
    if (tonumber(redis.call('GET', throttle)) or 0) < until_ms then
      redis.call('SET', throttle, until_ms, 'PX', wait)
    end
  end
end
if changed then adapt_write(adapt, a) end
if not a then return 0 end

-- An adaptive key's last hour, per minute, for GET /v1/limits/{key}/history:
-- a ring of 60 one-minute slots as finished.lua keeps. Field 'm<i>' is the
-- minute m (unix minutes, m % 60 == i), 'm<i>:eff' the effective limit at
-- its last settlement, 'm<i>:push' its pushbacks. Readers skip slots older
-- than the hour (lease.Client.History); the hash dies an hour after its
-- last write.
local history = KEYS[7]
local pushbacks = 0
for i = 5, #ARGV, 5 do
  if ARGV[i] == 'pushback' then pushbacks = pushbacks + 1 end
end
local m = string.format('%.0f', math.floor(now / minute))
local slot = 'm' .. (tonumber(m) % 60)
if redis.call('HGET', history, slot) ~= m then
  redis.call('HSET', history, slot, m, slot .. ':push', 0)
end
redis.call('HSET', history, slot .. ':eff', math.floor(a.eff))
redis.call('HINCRBY', history, slot .. ':push', pushbacks)
redis.call('PEXPIRE', history, adapt_life)
return math.floor(a.eff)
