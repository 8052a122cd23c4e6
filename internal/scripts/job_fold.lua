-- Folds ended jobs of one queue (fold, transition.lua: their events and
-- long fields into their folded keys, their hashes into listpacks), a
-- while after they ended: execution/fold.go picks them from the retired
-- index, in the order of its scores, and passes the highest score it took.
-- KEYS[1] stats   KEYS[3i - 1] job hash, KEYS[3i] events and KEYS[3i + 1]
-- folded key of job i (1..n)
-- ARGV[1] the retired score this call's jobs reach
-- Returns the retired score the queue's jobs are folded up to: the higher
-- of ARGV[1] and the one stored (another reaper may be further on). A job
-- that is not ended (retried since it was picked) or has no stream is left.
local stats = KEYS[1]
for i = 2, #KEYS, 3 do
  local j = {key = KEYS[i], events = KEYS[i + 1], folded = KEYS[i + 2]}
  local state = redis.call('HGET', j.key, 'state')
  if state and terminal(state) then
    fold(j)
  end
end
local upto = tonumber(ARGV[1])
local stored = tonumber(redis.call('HGET', stats, 'folded_to') or '0')
if stored >= upto then
  return int(stored)
end
redis.call('HSET', stats, 'folded_to', int(upto))
return int(upto)
