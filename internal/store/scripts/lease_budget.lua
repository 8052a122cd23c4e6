-- Reads a budgeted lease key's state (budget.lua); writes nothing.
-- KEYS[1] window   KEYS[2] spent   KEYS[3] throttle   KEYS[4] adapt
-- Returns {requests of the last minute, their tokens, the effective limit
-- as a string ("0" when not adapting), throttled until (ms, 0 when not)}.
local window, spent, throttle, adapt = KEYS[1], KEYS[2], KEYS[3], KEYS[4]

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local since = now - minute
local tokens = tonumber(redis.call('HGET', spent, '#')) or 0
local old = redis.call('ZRANGE', window, '-inf', '(' .. since, 'BYSCORE')
if #old > 0 then
  for _, n in ipairs(redis.call('HMGET', spent, unpack(old))) do
    tokens = tokens - (tonumber(n) or 0)
  end
end
local until_ms = tonumber(redis.call('GET', throttle)) or 0
if until_ms <= now then until_ms = 0 end
return {redis.call('ZCOUNT', window, since, '+inf'), tokens, redis.call('HGET', adapt, 'eff') or '0', until_ms}
