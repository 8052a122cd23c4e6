-- Writes a packed job back as it was before the packing (package scripts'
-- Pack): its hash, with the fold's marker, and its folded key's JSON, the
-- key's expiry kept; and puts it in its queue's fold_later, whose fold
-- packs it again (job_fold.lua) unless it changed by then: what unpacked
-- it may only have read it (a cancel refused). Go reads and decompresses
-- it first; nothing is written when the job changed since (unpacked by
-- another caller, or deleted).
-- KEYS[1] job hash   KEYS[2] folded key   KEYS[3] the queue's fold_later
-- ARGV[1] the packed value Go read   ARGV[2] the folded key's JSON
-- ARGV[3] the job's id   ARGV[4] when to pack it again (unix ms)
-- ARGV[5 ..] the hash's fields but folded: name, value, ...
-- (unpackCall in internal/store/job_calls.go is the one place in Go that lays these KEYS
-- and ARGV out: change the two together.)
-- Returns 1 when it wrote the job back, else 0.
if redis.call('EXISTS', KEYS[1]) == 1 or redis.call('GET', KEYS[2]) ~= ARGV[1] then
  return 0
end
redis.call('HSET', KEYS[1], 'folded', '1', unpack(ARGV, 5))
redis.call('SET', KEYS[2], ARGV[2], 'KEEPTTL')
redis.call('ZADD', KEYS[3], ARGV[4], ARGV[3])
return 1
