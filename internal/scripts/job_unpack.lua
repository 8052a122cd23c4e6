-- Writes a packed job back as it was before the packing (package scripts'
-- Pack): its hash, with the fold's marker, and its folded key's JSON, the
-- key's expiry kept. Go reads and decompresses it first; nothing is
-- written when the job changed since (unpacked by another caller, or
-- deleted).
-- KEYS[1] job hash   KEYS[2] folded key
-- ARGV[1] the packed value Go read   ARGV[2] the folded key's JSON
-- ARGV[3 ..] the hash's fields but folded: name, value, ...
-- (unpackCall in job/calls.go is the one place in Go that lays these KEYS
-- and ARGV out: change the two together.)
-- Returns 1 when it wrote the job back, else 0.
if redis.call('EXISTS', KEYS[1]) == 1 or redis.call('GET', KEYS[2]) ~= ARGV[1] then
  return 0
end
redis.call('HSET', KEYS[1], 'folded', '1', unpack(ARGV, 3))
redis.call('SET', KEYS[2], ARGV[2], 'KEEPTTL')
return 1
