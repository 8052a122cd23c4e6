-- Takes the schedules due now from some tenants' due indexes, for one
-- scheduler to fire (redis_now, int: transition.lua): at most ARGV[1] from
-- each tenant, so that no tenant's many due schedules hold back another's.
-- A taken member's score moves to now + ARGV[2], so other schedulers leave
-- it alone while it is fired, and find it again if this one dies first. A
-- tenant with more due than its share goes to the back of the index of
-- tenants (score now), behind every tenant due before; any other gets its
-- earliest score, or leaves the index when it has none.
-- KEYS[1] the index of tenants with schedules due
-- KEYS[2..n+1] the due indexes of the n tenants ARGV[3..n+2], in order
-- ARGV[1] the most to take from each tenant   ARGV[2] how long a take holds them (ms)
-- Returns {now (ms), more, tenant, name, tenant, name, ...}: the schedules
-- taken, and more = 1 when a tenant had more due than its share.
local tenants = KEYS[1]
local share, hold = tonumber(ARGV[1]), tonumber(ARGV[2])
local now = redis_now()
local held = int(now + hold)
local reply = {int(now), 0}
for i = 2, #KEYS do
  local due, tenant = KEYS[i], ARGV[i + 1]
  local taken = redis.call('ZRANGEBYSCORE', due, '-inf', now, 'LIMIT', 0, share + 1)
  for j = 1, math.min(share, #taken) do
    redis.call('ZADD', due, held, taken[j])
    reply[#reply + 1] = tenant
    reply[#reply + 1] = taken[j]
  end
  if #taken > share then
    reply[2] = 1
    redis.call('ZADD', tenants, int(now), tenant)
  else
    local first = redis.call('ZRANGE', due, 0, 0, 'WITHSCORES')
    if #first == 0 then
      redis.call('ZREM', tenants, tenant)
    else
      redis.call('ZADD', tenants, first[2], tenant)
    end
  end
end
return reply
