-- Folds ended jobs of one queue (fold, transition.lua: their events and
-- long fields into their folded keys, their hashes into listpacks), a
-- while after they ended: internal/store/exec_fold.go picks them from the retired
-- index, in the order of its scores, and passes the highest score it took;
-- and those due again in fold_later.
-- KEYS[1] stats   KEYS[2] retired   KEYS[3] fold_later
-- KEYS[3i + 1] job hash, KEYS[3i + 2] events and KEYS[3i + 3] folded key
-- of job i (1..n)
-- ARGV[1] the retired score this call's jobs from the retired index reach
-- (0: none)   ARGV[2] the highest retired score a job may have to be
-- folded (its end long enough ago)   ARGV[3] again_ms: how long after a
-- pass a job passed over is looked at again   ARGV[3 + i] job i's id
-- (foldArgs in internal/store/exec_fold.go is the one place in Go that lays these
-- KEYS and ARGV out: change the two together.)
-- Returns the retired score the queue's jobs are folded up to (the higher
-- of ARGV[1] and the one stored: another reaper may be further on), then
-- the ids of the jobs it folded, and of those folded before and unpacked
-- since, which Go packs (internal/store/exec_fold.go).
--
-- A job is left, and out of fold_later, when it is not in the retired
-- index (retried or deleted since it was picked), its retention is over
-- (its retired score is not after the clock: it is deleted soon), or it
-- has no stream (folded already: a folded job unpacked since, which
-- job_unpack.lua put here, is packed again by Go). A job whose webhook delivery is pending
-- is passed over into fold_later, to be looked at again after again_ms: a
-- drainer of the versions before the fold's reads the job's hash alone,
-- and would send its folded fields as null. A job whose retired score is
-- past ARGV[2] ended again since it was picked, or is in fold_later and
-- this reaper's retention less its fold delay is shorter than that of the
-- reaper that put it there: it is looked at again when it is ARGV[2]'s
-- (every job of fold_later due is rescored or removed, so a reaper that
-- reads full batches of it ends). A job's folded key expires a day after
-- its retired score, the end of its retention, when its hash is deleted,
-- by whichever version (one before the folded key's leaves the key): the
-- day is for a reaper late to delete it, so that a read or a retry of a
-- job past its retention still finds its fields while it is there.
local stats, retired, later = KEYS[1], KEYS[2], KEYS[3]
local upto, again = tonumber(ARGV[2]), tonumber(ARGV[3])
local now = redis_now()
local linger = 86400000 -- the day past its retention, ms
local waits, done, folded = {}, {}, {}

-- unpacked says whether the job of hash and events is folded, and was
-- packed since (job_unpack.lua): no stream came back under it. Go packs
-- it again, as a job just folded.
local function unpacked(hash, events)
  return redis.call('HEXISTS', hash, 'folded') == 1 and redis.call('EXISTS', events) == 0
end

for i = 4, #KEYS, 3 do
  local id = ARGV[(i - 1) / 3 + 3]
  local retire_at = tonumber(redis.call('ZSCORE', retired, id))
  if not retire_at or retire_at <= now then
    done[#done + 1] = id
  elseif retire_at > upto then
    waits[#waits + 1], waits[#waits + 2] = now + retire_at - upto, id
  elseif redis.call('HGET', KEYS[i], 'webhook_state') == 'pending' then
    waits[#waits + 1], waits[#waits + 2] = now + again, id
  else
    if fold({key = KEYS[i], events = KEYS[i + 1], folded = KEYS[i + 2], expire_at = retire_at + linger}) or
      unpacked(KEYS[i], KEYS[i + 1]) then
      folded[#folded + 1] = id
    end
    done[#done + 1] = id
  end
end
if #waits > 0 then
  redis.call('ZADD', later, unpack(waits))
end
if #done > 0 then
  redis.call('ZREM', later, unpack(done))
end
local reached = tonumber(ARGV[1])
local stored = tonumber(redis.call('HGET', stats, 'folded_to') or '0')
if stored < reached then
  redis.call('HSET', stats, 'folded_to', int(reached))
end
return {int(math.max(stored, reached)), unpack(folded)}
