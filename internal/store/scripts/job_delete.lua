-- Deletes an ended job of one queue: its record, its events, its index
-- entries, its retired entry and its charge, all at once (forget, transition.lua). (Its id → queue lookup lives
-- in another slot: the caller deletes it after this.)
-- KEYS[1] job hash   KEYS[2] events   KEYS[3] retired   KEYS[4] tenant index
-- KEYS[5] the job's deletion mark (job_submit.lua)
-- KEYS[6] folded key (transition.lua's fold)
-- KEYS[7] the tenant's retained bytes in the queue (stats.lua)
-- ARGV[1] the job id   ARGV[2] tenant of the caller ("" = admin, any tenant)
-- ARGV[3] how long the mark lives, ms: as long as an Idempotency-Key may
-- still stand for the job
-- (deleteCall in internal/store/job_calls.go is the one place in Go that lays these KEYS and
-- ARGV out: change the two together.)
-- A packed job (transition.lua's packed) is deleted as it is: it ended.
-- Returns {'missing'} when there is no such job for this caller,
-- {'deleted'} when it was deleted, or {'live', HGETALL of the job} when it
-- has not ended (nothing changed).
local job, events, retired, tenant_index = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local id, tenant = ARGV[1], ARGV[2]

local f = redis.call('HMGET', job, 'tenant', 'state')
local owner, state = f[1], f[2]
local ended = state == 'succeeded' or state == 'failed' or state == 'cancelled' or state == 'expired'
if not state then -- packed: it ended, and its tenant is in its value's head
  owner, ended = packed(KEYS[6]), true
end
if not owner or (tenant ~= '' and owner ~= tenant) then
  return {'missing'}
end
if not ended then
  return {'live', redis.call('HGETALL', job)}
end
forget(retired, {id}, {job, events, KEYS[6]}, {tenant_index}, {KEYS[7]})
redis.call('SET', KEYS[5], '1', 'PX', ARGV[3])
return {'deleted'}
