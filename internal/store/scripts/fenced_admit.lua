-- KEYS[1] fenced resource hash (field highest = highest token seen)
-- ARGV[1] token (decimal, no leading zeros, >= 1)
-- Returns {1, token} when admitted (token >= highest; highest becomes token),
-- {0, highest} when token < highest: refused, nothing changes. Tokens come
-- back as decimal strings. The stored value and its token are left alone.
local fenced = KEYS[1]
local token = ARGV[1]

-- Tokens are compared as decimal strings, shorter first: exact over the whole
-- uint64 range, where Lua numbers (doubles) lose integers above 2^53.
local highest = redis.call('HGET', fenced, 'highest')
if highest and (#token < #highest or (#token == #highest and token < highest)) then
  return {0, highest}
end

-- No TTL: forgetting the highest token would let a stale writer back in.
redis.call('HSET', fenced, 'highest', token)
return {1, token}
