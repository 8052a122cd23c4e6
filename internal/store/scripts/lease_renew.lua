-- KEYS[1] lease set (member: holder, score: expiry in ms on the Redis clock)
-- ARGV[1] ttl_ms   ARGV[2..] holders
-- Returns, for each holder, its new expiry in ms when renewed, 0 when its
-- lease is gone: released, reaped, or past its expiry and not yet reaped.
-- A renew never resurrects a lease: once gone, someone else may already
-- hold the slot.
local leases = KEYS[1]
local ttl = tonumber(ARGV[1])

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
-- now is truncated to the millisecond: round the expiry up, so the lease
-- never ends before the holder's trust window (sent + ttl) does.
local expires = now + 1 + ttl

local holders = {}
for i = 2, #ARGV do
  holders[i - 1] = ARGV[i]
end
local scores = redis.call('ZMSCORE', leases, unpack(holders))
local out, add, dead = {}, {}, {}
for i, holder in ipairs(holders) do
  local score = scores[i]
  if score and tonumber(score) > now then
    add[#add + 1] = expires
    add[#add + 1] = holder
    out[i] = expires
  else
    if score then
      dead[#dead + 1] = holder
    end
    out[i] = 0
  end
end
if #dead > 0 then
  redis.call('ZREM', leases, unpack(dead))
end
if #add > 0 then
  redis.call('ZADD', leases, 'XX', unpack(add))
  if redis.call('PEXPIRETIME', leases) < expires then
    redis.call('PEXPIREAT', leases, expires) -- the set outlives its latest lease (see lease_acquire.lua)
  end
end
return out
