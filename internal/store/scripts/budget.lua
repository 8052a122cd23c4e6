-- The budgets of a lease key (Load prepends it to lease_acquire.lua and
-- lease_settle.lua): the requests and tokens of its rolling minute, its
-- throttle, and an adaptive key's effective limit. All live in the key's
-- own hash slot, beside its lease set, so one script checks and reserves
-- them with the slot.
--
-- window   zset   holder -> when its execution started (ms, Redis clock):
--                 the requests of the last minute
-- spent    hash   holder -> its tokens (the estimate until settled), and
--                 field '#' their sum: the tokens of the last minute
-- throttle string until when (ms) the upstream asked to be left alone
-- adapt    hash   eff (the effective limit, a real number), ceil (the
--                 level the upstream last refused; above the limit: none
--                 known), hold (ms), untl (no probe before it), cut (when
--                 it was last cut), run (successes since), probe (when
--                 the probe above the served level started, 0: none),
--                 won (successes of calls started since the probe), thr
--                 (when the last throttle ends: the limit reopens over a
--                 ramp from there)
--
-- Every one of them expires when unused: the window and spent a minute
-- after their last entry, the throttle when it ends, adapt an hour after
-- its last change.

local minute = 60000
local adapt_life = 3600000

-- cap_of is the most an adaptive key's effective limit may reach: its
-- limit, or MaxLimit (job.MaxLimit) for a key with none.
local function cap_of(limit)
  if limit < 0 then return 1000000 end
  return limit
end

-- budget_reap forgets the window's entries older than a minute, and their
-- tokens.
local function budget_reap(window, spent, now, tpm)
  local old = redis.call('ZRANGE', window, '-inf', '(' .. (now - minute), 'BYSCORE')
  if #old == 0 then return end
  if tpm >= 0 then
    local n = redis.call('HMGET', spent, unpack(old))
    local sum = 0
    for i = 1, #old do sum = sum + (tonumber(n[i]) or 0) end
    redis.call('HDEL', spent, unpack(old))
    redis.call('HINCRBY', spent, '#', -sum)
  end
  redis.call('ZREMRANGEBYSCORE', window, '-inf', '(' .. (now - minute))
end

-- ramp is how long the effective limit takes to reopen after a throttle:
-- claims held by it come back spread, so that the first refusals after a
-- capacity that fell meanwhile stop the rest.
local ramp = 250

-- adapt_read returns an adaptive key's state; a key new to adapting
-- starts low (slow start): an eighth of its cap, 4 at most, 1 at least.
local function adapt_read(adapt, cap)
  local f = redis.call('HMGET', adapt, 'eff', 'ceil', 'hold', 'untl', 'cut', 'run', 'probe', 'won', 'thr')
  local eff = tonumber(f[1])
  if not eff then
    return {eff = math.max(1, math.min(cap / 8, 4)), ceil = cap + 1, hold = 0, untl = 0, cut = 0,
      run = 0, probe = 0, won = 0, thr = 0}
  end
  return {eff = eff, ceil = tonumber(f[2]), hold = tonumber(f[3]), untl = tonumber(f[4]), cut = tonumber(f[5]),
    run = tonumber(f[6]) or 0, probe = tonumber(f[7]) or 0, won = tonumber(f[8]) or 0, thr = tonumber(f[9]) or 0}
end

-- adapt_limit is the most holders an adaptive key grants at now: its
-- effective limit, reopened over the ramp after a throttle.
local function adapt_limit(a, now)
  local eff = math.floor(a.eff)
  if now < a.thr + ramp then
    eff = math.max(1, math.floor(eff * (now - a.thr) / ramp))
  end
  return eff
end

local function adapt_write(adapt, a)
  redis.call('HSET', adapt, 'eff', tostring(a.eff), 'ceil', tostring(a.ceil), 'hold', a.hold,
    'untl', a.untl, 'cut', a.cut, 'run', a.run, 'probe', a.probe, 'won', a.won, 'thr', a.thr)
  redis.call('PEXPIRE', adapt, adapt_life)
end
