-- Moves a schedule past the due time it was fired for: the second step of a
-- fire, after its job was created (or the fire skipped). A compare-and-set:
-- only the first of several schedulers that fired the same due time moves
-- it (int: transition.lua).
-- KEYS[1] the schedule's record   KEYS[2] the tenant's due index
-- KEYS[3] the index of tenants with schedules due
-- ARGV[1] name   ARGV[2] generation the fire read
-- ARGV[3] the due time fired (ms)   ARGV[4] the next due time (ms)
-- ARGV[5] index score: when a scheduler should look again (ms; ARGV[4]
-- unless the fire is deferred, ARGV[3] == ARGV[4] then)
-- ARGV[6] the fired job's id ("" = no job: skipped or deferred)   ARGV[7] its queue
-- ARGV[8] what this due time came to: "fired", "skipped", "deferred", or ""
-- (nothing: the index ran ahead of the record)   ARGV[9] tenant
-- Returns 0 when the record is gone, was re-created, is paused or is
-- already past ARGV[3] (only the last job is recorded then, if it is
-- newer); 2 when it moved the schedule and ARGV[8] differs from what the
-- due time before came to (the record's 'outcome'), so a run of skipped
-- or deferred due times is logged once; 1 when it moved it otherwise.
local rec, due, tenants = KEYS[1], KEYS[2], KEYS[3]
local s = redis.call('HMGET', rec, 'gen', 'next', 'paused', 'last_run', 'outcome')
if s[1] ~= ARGV[2] then
  return 0
end
if ARGV[6] ~= '' and (not s[4] or s[4] == '' or tonumber(s[4]) < tonumber(ARGV[3])) then
  redis.call('HSET', rec, 'last_run', ARGV[3], 'last_job', ARGV[6], 'last_queue', ARGV[7])
end
if s[2] ~= ARGV[3] or s[3] == '1' then
  return 0
end
local moved = 1
if ARGV[8] ~= '' and s[5] ~= ARGV[8] then
  moved = 2
  redis.call('HSET', rec, 'next', ARGV[4], 'outcome', ARGV[8])
else
  redis.call('HSET', rec, 'next', ARGV[4])
end
redis.call('ZADD', due, ARGV[5], ARGV[1])
-- Only ever earlier: a later score is the take's to set, after the
-- tenant's other due schedules.
redis.call('ZADD', tenants, 'LT', ARGV[5], ARGV[9])
return moved
