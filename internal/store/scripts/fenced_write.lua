-- KEYS[1] fenced resource hash (fields: highest = highest token seen,
--         token = token the value was written with, value)
-- ARGV[1] token (decimal, no leading zeros, >= 1)   ARGV[2] value
-- Returns {1, token} when the value is stored (token >= highest; equal is the
-- same owner writing again), {0, highest} when token < highest: the write is
-- refused and nothing changes. Tokens come back as decimal strings.
local fenced = KEYS[1]
local token, value = ARGV[1], ARGV[2]

-- Tokens are compared as decimal strings, shorter first: exact over the whole
-- uint64 range, where Lua numbers (doubles) lose integers above 2^53.
local highest = redis.call('HGET', fenced, 'highest')
if highest and (#token < #highest or (#token == #highest and token < highest)) then
  return {0, highest}
end

-- No TTL: forgetting the highest token would let a stale writer back in.
redis.call('HSET', fenced, 'highest', token, 'token', token, 'value', value)
return {1, token}
