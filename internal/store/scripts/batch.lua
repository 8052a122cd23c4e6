-- Helpers for the scripts that act on a batch of jobs (Load prepends it).

-- group returns the list kept under key in groups, new if need be: what a
-- batch does to each of many keys is collected per key, then done with one
-- command per key.
local function group(groups, key)
  local g = groups[key]
  if not g then
    g = {}
    groups[key] = g
  end
  return g
end
