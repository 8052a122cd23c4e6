-- A job's events before it has a stream (Load prepends it, before
-- transition.lua). Most jobs never stream output and nobody follows them
-- live: their state events are kept in their hash's field states, where a
-- move writes them in the HSET it makes anyway, instead of an XADD to a
-- stream of their own (a stream is a few hundred bytes and the most
-- costly command of a move). A job's stream is made when something needs
-- it: the first event its execution emits (execution_emit.lua), a reader
-- that waits for the next event (job_follow.lua), or a states field
-- grown past states_max (move). stream_states then moves the events into
-- it with their ids and deletes the field, and every later event of the
-- job goes to the stream. A job without the field (created by an older
-- version, or one whose events were moved) has its events in its stream,
-- or in its folded key (fold, transition.lua).
--
-- The field holds one record per event, newest first, each
-- "<id> <data>\n": the id is a stream id, after every id before it, as
-- XADD would give it (the clock in ms, a sequence within one ms); the data
-- is the state event's JSON, which holds no newline (transition.lua's
-- state_data), or nothing for the event every job starts with (below).
-- Newest first, so the next id is read off the front.

-- submitted is the data of a job's first event, its submit's move to
-- queued (state_data of it: attempt 0, nothing shown but token and
-- cancel_requested "0"), the same for every job. Its record holds no data
-- (kept_data): so every value of a new job's hash of short fields is at
-- most 64 bytes (hash-max-listpack-value's default), and its hash stays a
-- listpack until it runs, not a hashtable, which costs a submit a fifth of
-- its work and a waiting job twice its memory. The event keeps no data
-- wherever it is moved (its stream, its folded key): no script reads a
-- state event's data, and Go's readers take a state event of none for
-- this one (scripts.SubmittedStateData in internal/store/scripts/model.go).
local submitted = '{"state":"queued","attempt":0,"job":["","","0","","0","","","","","",""]}'

-- kept_data is what the record of an event of data holds.
local function kept_data(data)
  if data == submitted then
    return ''
  end
  return data
end

-- states_max is the most bytes a job's states field may hold; a move that
-- would pass it moves the job's events to its stream, which MAXLEN caps (a
-- job waiting for signals over and over has no other bound).
local states_max = 4096

-- next_state_id is the id of the event after those in states, at now (ms;
-- now_s as text, which the caller has made already). A new job's states
-- are "": it skips the pattern, which costs about as much as the rest of
-- a move's id and states.
local function next_state_id(states, now, now_s)
  if states ~= '' then
    local ms, seq = string.match(states, '^(%d+)%-(%d+) ')
    if ms and tonumber(ms) >= now then
      return ms .. '-' .. string.format('%d', tonumber(seq) + 1)
    end
  end
  return now_s .. '-0'
end

-- two_of returns the values of names a and b in flat (a list: name,
-- value, ...), '' for one it lacks. (transition.lua uses it too.)
local function two_of(flat, a, b)
  local va, vb = '', ''
  for i = 1, #flat, 2 do
    if flat[i] == a then
      va = flat[i + 1]
    elseif flat[i] == b then
      vb = flat[i + 1]
    end
  end
  return va, vb
end

-- id_before says whether stream id a comes before stream id b.
local function id_before(a, b)
  local am, as = string.match(a, '^(%d+)%-(%d+)$')
  local bm, bs = string.match(b, '^(%d+)%-(%d+)$')
  am, bm = tonumber(am), tonumber(bm)
  return am < bm or (am == bm and tonumber(as) < tonumber(bs))
end

-- job_events returns the events of a job, three strings each (id, type,
-- data), in the order of their ids: those of states (its states field, or
-- false) and entries (its stream, as XRANGE reads it). Both have events
-- only while a worker of an older version, which appends to the stream,
-- runs beside this one.
local function job_events(states, entries)
  local events = {}
  if states then
    for id, data in string.gmatch(states, '(%d+%-%d+) ([^\n]*)\n') do
      table.insert(events, 1, {id, 'state', data})
    end
  end
  if #entries > 0 then
    for _, e in ipairs(entries) do
      local typ, data = two_of(e[2], 'type', 'data')
      events[#events + 1] = {e[1], typ, data}
    end
    if states then
      table.sort(events, function(a, b) return id_before(a[1], b[1]) end)
    end
  end
  local flat = {}
  for _, e in ipairs(events) do
    flat[#flat + 1], flat[#flat + 2], flat[#flat + 3] = e[1], e[2], e[3]
  end
  return flat
end

-- stream_states moves the events of job j ({key, events}) out of states
-- (its states field as the caller read it) into its stream, as described
-- above. Events a worker of an older version appended to the stream are
-- merged in by id; an id taken twice (both in one ms) is moved up to the
-- next free one.
local function stream_states(j, states)
  local entries = redis.call('XRANGE', j.events, '-', '+')
  local flat = job_events(states, entries)
  if #entries > 0 then
    redis.call('DEL', j.events)
  end
  local last = '0-0'
  for i = 1, #flat, 3 do
    local id = flat[i]
    if not id_before(last, id) then
      local ms, seq = string.match(last, '^(%d+)%-(%d+)$')
      id = ms .. '-' .. string.format('%d', tonumber(seq) + 1)
    end
    redis.call('XADD', j.events, id, 'type', flat[i + 1], 'data', flat[i + 2])
    last = id
  end
  redis.call('HDEL', j.key, 'states')
end
