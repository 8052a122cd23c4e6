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
-- docs/architecture.md, "The control law of an adaptive key"). Only news
-- moves it: a call started since the last cut. A success of one, under a
-- limit in use, grows it: in the slow start while no refused level is
-- known (x1.4 a round, x2 after a rise was believed); else a slot a round
-- up to just below the refused level, where it waits out a hold, then
-- probes one above. A few successes with the probe's slot in flight, none
-- refused, say the capacity rose: the refused level is forgotten and the
-- slow start resumes. A pushback of one cuts it: to the holders still in
-- flight and one below its value (the upstream served those and refused
-- one more), a cut near the last one's level lengthening the hold (x1.5,
-- 3 s to 12 s; a success with slots to spare ends it); or, refused with no probe out below a level served for a
-- round since the last cut (the capacity fell, by how much nobody knows),
-- to half the holders in flight, and the slow start finds the level
-- again. A pushback of a call launched before the last cut only lowers it
-- to the holders in flight. A Retry-After throttles the key until it
-- passes; unless the probe was refused, the limit then reopens over a
-- ramp (budget.lua).
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
-- The holders still in flight, and whether claims were refused lately:
-- the same for every holder of the batch (all left the set above).
local others = a and redis.call('ZCOUNT', leases, '(' .. now, '+inf')
local refused = a and redis.call('EXISTS', waiting) == 1
local changed = false
for i = 4, #ARGV, 5 do
  local holder, how, actual, est, wait = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2]), tonumber(ARGV[i + 3]), tonumber(ARGV[i + 4])
  -- What the claim reserved: the estimate clamped as lease_acquire.lua
  -- clamps it.
  est = math.max(0, math.min(est, tpm))
  local unknown = false -- this pushback leaves the level unknown
  -- When it started, from the window: read only where it counts (a
  -- success that reports no tokens, on a key that does not adapt, the
  -- most common end, needs none).
  local started = (how == 'unused' or tpm >= 0 and actual >= 0 or a and how ~= 'other') and
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
  local in_use = a and how == 'ok' and (refused or others + 1 >= math.floor(a.eff))
  if a and how == 'ok' and not in_use and a.untl > now then
    -- A success with slots to spare and no claim waiting: demand fell
    -- below the limit, and what the hold knew of the capacity grows
    -- stale. When the limit is next full, probe at once.
    a.untl, changed = now, true
  end
  if in_use and (started or 0) >= a.cut then
    -- Only a success under a limit in use says it may grow (claims were
    -- refused lately, or it ran with the limit full): one that ran with
    -- slots to spare tells nothing of the upstream's capacity.
    a.run = a.run + 1
    if a.probe > 0 and others + 1 >= a.ceil then
      -- Successes with the probe's slot in flight, none refused: the
      -- capacity rose. One may be luck (a call the upstream had ended
      -- still held its slot when the probe started), a few are not.
      a.won = a.won + 1
      if a.won >= math.max(2, a.eff / 10) then
        a.ceil, a.probe, a.won, a.hold = cap + 1, 0, 0, 0
      end
    end
    if a.ceil > cap then
      -- The slow start: x1.4 a round; x2 after a rise was believed (its
      -- hold forgotten), from a level the upstream served, above which
      -- it now has room.
      a.eff = a.eff + (a.cut > 0 and a.hold == 0 and 1 or 0.4)
    elseif a.eff + 1 < a.ceil then
      a.eff = math.min(a.eff + 1 / a.eff, a.ceil - 1)
    elseif a.probe == 0 and now >= a.untl then
      a.eff, a.probe, a.won = a.ceil, now, 0
    end
    a.eff = math.min(a.eff, cap)
    changed = true
  elseif a and how == 'pushback' then
    local at = started or now
    if at >= a.cut then
      local eff
      local fell = a.probe == 0 and a.ceil <= cap and a.run >= a.eff
      unknown = a.probe == 0
      if fell then
        eff = math.max(1, math.floor(math.min(a.eff, others) / 2))
        a.ceil = cap + 1
      else
        eff = math.max(1, math.min(math.floor(a.eff) - 1, others))
        if math.abs(a.ceil - (eff + 1)) <= math.max(1, a.ceil / 10) and now - a.cut < minute then
          a.hold = math.min(math.max(a.hold * 1.5, 3000), 12000)
        else
          a.hold = 3000
        end
        a.untl, a.ceil = now + a.hold, eff + 1
      end
      a.eff, a.cut, a.run, a.probe, a.won = eff, now, 0, 0, 0
      changed = true
    elseif others < a.eff then
      a.eff = math.max(1, others)
      a.ceil = math.min(a.ceil, a.eff + 1)
      changed = true
    end
  end
  if a and how == 'pushback' and wait > 0 then
    local until_ms = now + wait
    if (tonumber(redis.call('GET', throttle)) or 0) < until_ms then
      redis.call('SET', throttle, until_ms, 'PX', wait)
    end
    -- Unless the probe was refused (the level below it is known), the
    -- limit reopens over the ramp once the throttle ends (a throttle that
    -- holds a ramp back moves it): the capacity may have fallen further.
    if until_ms > a.thr and (unknown or a.thr > now) then a.thr, changed = until_ms, true end
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
local m = string.format('%d', math.floor(now / minute))
local slot = 'm' .. (tonumber(m) % 60)
if redis.call('HGET', history, slot) ~= m then
  redis.call('HSET', history, slot, m, slot .. ':push', 0)
end
redis.call('HSET', history, slot .. ':eff', math.floor(a.eff))
redis.call('HINCRBY', history, slot .. ':push', pushbacks)
redis.call('PEXPIRE', history, adapt_life)
return math.floor(a.eff)
