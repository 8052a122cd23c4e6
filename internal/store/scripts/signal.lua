-- Waits and signals, shared by the scripts that end, resume and signal a
-- waiting job (Load prepends it). A job waits for one named signal
-- (wait_for, until wait_until); a signal of another name, or one sent
-- before the wait, is kept in the job hash as field sig:<name> (its data)
-- for a later wait, bounded per job by the caller: signals_pending counts
-- them, signals_bytes their data. What resumed the job is its signal
-- field, which every later execution is handed with the checkpoint.

-- signal_json is the signal field: name, data (JSON text: null for none)
-- and whether the wait timed out instead.
local function signal_json(name, data, timed_out)
  return '{"name":' .. cjson.encode(name) .. ',"data":' .. data .. ',"timed_out":' ..
    (timed_out and 'true' or 'false') .. '}'
end

-- signal_take adds to fields (a flat list, as move takes) the counts of
-- the kept signals after one of bytes bytes leaves them; pending and
-- bytes are the counts before (nil for none).
local function signal_take(fields, pending, bytes, size)
  fields[#fields + 1], fields[#fields + 2] = 'signals_pending', string.format('%d', (tonumber(pending) or 0) - 1)
  fields[#fields + 1], fields[#fields + 2] = 'signals_bytes', string.format('%d', (tonumber(bytes) or 0) - size)
end

-- resumed adds to fields what ends a wait: no wait any more, and the
-- signal that ended it.
local function resumed(fields, signal)
  local more = {'wait_for', '', 'wait_until', '', 'signal', signal}
  for k = 1, #more do
    fields[#fields + 1] = more[k]
  end
end
