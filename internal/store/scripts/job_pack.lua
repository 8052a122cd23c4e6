-- Packs folded jobs of one queue (package scripts' Pack): each one's hash
-- and folded key become its folded key alone, compressed by Go, the key's
-- expiry kept (a day past the job's retention, set by the fold). Go read
-- each job's hash and folded key after the fold; a job that changed since
-- (retried, deleted, or unpacked and changed) is left as it is.
-- KEYS[2i - 1] job hash and KEYS[2i] folded key of job i (1..n)
-- ARGV, for each job in turn: m, the number of strings its HGETALL read,
-- then those m strings, the folded key's JSON read, and the packed value
-- (packArgs in internal/store/exec_fold.go is the one place in Go that lays these
-- KEYS and ARGV out: change the two together.)
-- Returns how many jobs it packed.
local at, packed = 1, 0
for i = 1, #KEYS, 2 do
  local m = tonumber(ARGV[at])
  local read = {}
  for k = at + 1, at + m, 2 do
    read[ARGV[k]] = ARGV[k + 1]
  end
  local h = redis.call('HGETALL', KEYS[i])
  local same = #h == m and redis.call('GET', KEYS[i + 1]) == ARGV[at + m + 1]
  for k = 1, #h, 2 do
    if not same then
      break
    end
    same = read[h[k]] == h[k + 1]
  end
  if same then
    redis.call('DEL', KEYS[i])
    redis.call('SET', KEYS[i + 1], ARGV[at + m + 2], 'KEEPTTL')
    packed = packed + 1
  end
  at = at + m + 3
end
return packed
