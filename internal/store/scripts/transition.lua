-- The queue's data model and its one transition rule (Load prepends it,
-- after stats.lua and finished.lua). Every script that changes a job's state does it
-- with move; none writes state, the stats, a state event or the retired
-- index itself.
--
-- The job hash, {q:Q}:job:<id>: one string per field, "" for none (or the
-- field absent: every reader takes a field the hash lacks as "", or as
-- its usual value for the fields implied names), times in unix ms of the
-- Redis clock. Who writes each field (submit creates those it has a value
-- for other than the usual one; move writes state and finished_at in every
-- script):
--
--   field              holds                                   written by
--   state              see may_move                            move
--   token              the latest execution's fencing token    claim
--   attempt            the latest execution's attempt: the     claim (+1, or kept when
--                      attempts spent against max_attempts,     unspent)
--                      with the latest if it spent one
--   unspent            "1": the latest execution spent no
--                      attempt (a hand-off, a pushback, a wait),
--                      so the next one runs on the same attempt
--                      (absent: it spent one, or none ran)      finish (a hand-off, a
--                                                              pushback, a wait), claim
--                                                              and retry (delete it)
--   max_attempts       the attempts it may spend in all        submit, retry (attempt + the original)
--   retries            "<state event id>:<max_attempts before
--                      it>" per retry, comma-separated          retry
--   exec_id            the latest execution's id               claim
--   exec_state         running | succeeded | failed | timed_out | cancelled
--                      | handed_off | pushback | waiting | lost claim, finish, reap
--   exec_worker, exec_attempt, exec_started_at                 claim
--   exec_heartbeat_at  its last renewal                        claim, heartbeat
--   exec_finished_at                                           claim (""), finish, reap
--   exec_trace         traceparent of the last finished
--                      execution's span                        finish
--   started_at         the job's first start                   claim (the first one)
--   finished_at        when it became terminal                 move ("" when it leaves one)
--   result             JSON, on success only                   finish
--   error              JSON {code, message}: why it ended, or
--                      the last attempt's error                finish, reap, expire, cancel,
--                                                              promote (a wait's timeout)
--   cancel_requested   "1": a cancel asked it to stop          cancel (running),
--                                                              retry ("0")
--   pushbacks          pushbacks in a row (absent: none)       finish, retry ("0")
--   schedule           the schedule that fired it ("": none)   submit only
--   cost               the tokens it is estimated to spend
--                      of its keys' tpm budgets ("": none)     submit only
--   webhook            the URL its ends are POSTed to ("" or
--                      absent: none)                           submit only
--   webhook_id         the delivery of its last end: its
--                      webhook-id, "msg_<id>_<n>" for its nth  move (reaching a terminal state)
--   webhook_state      pending | delivered | failed            move (pending), webhook_record
--   webhook_attempts   tries of that delivery                  move ("0"), webhook_record
--   webhook_first_at   its first try ("" before it)            move (""), webhook_record
--   webhook_tries      its last tries, a JSON array of
--                      {at, status, error}                     move ("[]"), webhook_record
--   wait_for           the signal a waiting job waits for      finish (to waiting),
--   wait_until         when its wait times out                 signal, promote, cancel ("")
--   signal             JSON {name, data, timed_out}: what
--                      resumed it from its last wait (absent:
--                      none yet)                               finish, signal, promote
--   checkpoint         JSON, the last checkpoint (absent: none) checkpoint
--   states             its events while it has no stream
--                      (states.lua; absent: in its stream)     move, submit (""),
--                                                              emit, follow (delete it)
--   folded             "1": the job is folded (see fold below):
--                      its long fields and events are in
--                      {q:Q}:folded:<id> (absent: not folded)  fold (job_fold),
--                                                              expand (a move out of ended),
--                                                              unpack (job_unpack)
--   events             the events of an ended job folded by an
--                      older version (absent: not so)          expand (deletes it)
--   sig:<name>         JSON data of a signal kept for a later
--                      wait (sent before it)                   signal (add), finish (take)
--   signals_pending, signals_bytes  how many are kept, and
--                      their data's bytes (absent: none)       signal, finish
--   tenant, kind, input, priority, concurrency_keys (the lane),
--   timeout_ms, max_wait_ms, on_busy, metadata, trace, created_at,
--   nonce (only a job submitted with an idempotency key:
--   job_submit.lua)                                            submit only: they never change
--   id, queue          the job's, which its key names: only a job
--                      an older version submitted has them     (none now)
--
-- A packed job (see packed below) has no hash: its fields are in its
-- folded key, with the rest, compressed.
--
-- (claim is execution_claim.lua, which also reaps lost executions, expires
-- jobs at max_wait and promotes due ones; finish execution_finish.lua;
-- heartbeat execution_heartbeat.lua; checkpoint execution_checkpoint.lua;
-- submit, cancel, retry and signal job_*.lua.)
-- result is written by the move to succeeded alone, and may_move has no way
-- out of succeeded: it is "" in every other state, before and after.
--
-- A move, in one step with the caller's other writes: the new state
-- (checked by may_move) and the caller's fields in one HSET, finished_at
-- set on reaching a terminal state and cleared on leaving one, the stats
-- hash's counts per state and per tenant (stats.lua; and finished.lua's
-- per-minute ring), a state event (in the job's states field or on its
-- stream: states.lua), and the retired index: a terminal job joins
-- {q:Q}:retired scored by the end of its retention, and leaves it when it
-- is retried; forget takes a terminal job out of everything. A job with a
-- webhook that reaches a terminal state gets a new delivery in the
-- queue's webhook outbox (deliver), in the same step.

-- may_move says whether a job may move from state from to state to: the
-- state diagram. '' is a job not yet created. (Functions, not tables: a
-- script builds its tables anew at every call, and a claim or a finish of
-- a few jobs would spend a tenth of its work on them.)
local function may_move(from, to)
  if to == 'queued' then -- submit, promote, hand-off, a wait's signal or timeout, retry of an ended job
    return from == '' or from == 'running' or from == 'retrying' or from == 'waiting' or from == 'failed' or
      from == 'cancelled' or from == 'expired'
  elseif to == 'running' then
    return from == 'queued'
  elseif to == 'succeeded' or to == 'failed' or to == 'retrying' or to == 'waiting' then
    return from == 'running'
  elseif to == 'cancelled' then
    return from == 'queued' or from == 'running' or from == 'retrying' or from == 'waiting'
  elseif to == 'expired' then
    return from == 'queued' or from == 'retrying'
  end
  return false
end

-- terminal says whether state is one a job ends in.
local function terminal(state)
  return state == 'succeeded' or state == 'failed' or state == 'cancelled' or state == 'expired'
end

-- shown_names are the fields the API shows that moves change, besides state,
-- attempt and finished_at (which move writes itself). Each state event
-- carries them as they were at its move (a snapshot), so that a replay
-- shows the job as it was then, not as it is now: the API takes the fields
-- that never change from the hash, and result, which only succeeded has
-- (see above), from the hash of a succeeded job. exec_heartbeat_at changes
-- between moves too; an event holds the last one before it.
--
-- A move takes them as an array in shown_names' order, as they are after it: a
-- script on a hot path (claim, finish) builds it from what it read and
-- what it writes; the others read them (shown_of) and lay their writes
-- over them (with). Reading every field by name would cost a claim or a
-- finish as much as the rest of its move: each field read scans the hash.
local function shown_names()
  return {'started_at', 'cancel_requested', 'error', 'token', 'exec_id', 'exec_worker',
    'exec_attempt', 'exec_started_at', 'exec_heartbeat_at', 'exec_finished_at'}
end

-- implied are the fields a job's hash leaves out when they hold their
-- usual value (every job has them, most with that value): a submit writes
-- them only when set otherwise, and a fold drops them. Every reader takes
-- an absent one as that value: the scripts where they read it (the claim,
-- the finish, cancel, retry, signal, fields_of, expand) and package job
-- (ParseRecord, folded.events). Fewer fields make a submit's HSET, its
-- AOF record and a claim's HMGET cheaper (the listpack is scanned for
-- each), and take an llm.chat job's folded hash from 760 bytes to 632.
local function implied()
  return {attempt = '0', cancel_requested = '0', started_at = '', max_wait_ms = '0', priority = '0',
    on_busy = 'queue'}
end

-- event_names name the values of a state event's job array (state_data):
-- finished_at, then shown_names.
local function event_names()
  local names = shown_names()
  table.insert(names, 1, 'finished_at')
  return names
end

-- int formats an integral number (Lua numbers would reach Redis as 14
-- significant digits). '%d' takes it as a 64-bit integer: exact below
-- 2^53, and a third cheaper than '%.0f', which formats a double.
local function int(x) return string.format('%d', x) end

-- redis_now is the Redis clock in ms.
local function redis_now()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- shown_of reads the shown fields (shown_names) of the job hash at key: an
-- absent one is implied, or "" (a field a job from an older version
-- lacks).
local function shown_of(key)
  local names, usual = shown_names(), implied()
  local shown = redis.call('HMGET', key, unpack(names))
  for i = 1, #names do
    shown[i] = shown[i] or usual[names[i]] or ''
  end
  return shown
end

-- with lays fields (a flat list: name, value, ...) over shown, for those
-- of them that shown_names lists, and returns shown.
local function with(shown, fields)
  local names = shown_names()
  for i = 1, #fields, 2 do
    for k = 1, #names do
      if names[k] == fields[i] then
        shown[k] = fields[i + 1]
      end
    end
  end
  return shown
end

-- transitions starts the moves of one script: what they change in the
-- queue's stats and retired index is written once, by settle.
-- retention_ms is how long a job that turns terminal is kept (nil when
-- none can); maxlen caps event streams; outbox is the queue's webhook
-- outbox (nil in a script that ends no job).
local function transitions(stats, retired, now, retention_ms, maxlen, outbox)
  return {stats = stats, retired = retired, now = now, now_s = int(now), outbox = outbox,
    retire_at = retention_ms and int(now + tonumber(retention_ms)),
    maxlen = maxlen, counts = {}, ended = {}, retiring = {}, unretiring = {}, usage = false, used = {}}
end

-- state_data is the data of a state event: {"state", "attempt", "job":
-- [finished_at, then shown in shown_names' order], "" for none}
-- (job.Job.At reads it). It is concatenated in one expression: cjson, or a
-- table of the fields, cost as much as the rest of a move. Every value is
-- digits, an id or "" except error, JSON text that cjson quotes, and
-- exec_worker, whose characters the worker checks (execution.Config.ID):
-- no newline, which states.lua's records rely on. A nil value (a script
-- that forgot one) raises. A move to waiting adds "wait": [wait_for,
-- wait_until, checkpoint] (wait), which no other state has.
local function state_data(state, attempt, finished_at, s, wait)
  local err = s[3]
  if err ~= '' then
    err = cjson.encode(err)
  else
    err = '""'
  end
  return '{"state":"' .. state .. '","attempt":' .. attempt .. ',"job":["' .. finished_at .. '","' .. s[1] ..
    '","' .. s[2] .. '",' .. err .. ',"' .. s[4] .. '","' .. s[5] .. '","' .. s[6] .. '","' .. s[7] ..
    '","' .. s[8] .. '","' .. s[9] .. '","' .. s[10] .. '"]' .. (wait or '') .. '}'
end

-- wait_of is the "wait" member of the state event of a move to waiting
-- with fields (which hold wait_for and wait_until) of a job whose
-- checkpoint is checkpoint ("" for none): the checkpoint the execution
-- saved before it waited, which a later execution may replace. It is a
-- JSON string, so that no newline of its JSON reaches states.lua's records.
local function wait_of(fields, checkpoint)
  local name, untl = two_of(fields, 'wait_for', 'wait_until')
  return ',"wait":[' .. cjson.encode(name) .. ',"' .. untl .. '",' .. cjson.encode(checkpoint) .. ']'
end

-- deliver adds, when job j has a webhook, the delivery of the end it is
-- reaching to the queue's webhook outbox, due now, with its fields
-- (added to fields, for the move's one HSET): in the step that ends the
-- job, so no crash between the end and the outbox loses the delivery.
-- Each end is a delivery of its own, with a new id (the webhook-id that
-- every try of it carries); a delivery still pending when the job ends
-- again is replaced by the new one.
local function deliver(tx, j, fields)
  local w = j.webhook -- {webhook, webhook_id} when the caller read them
  if not w then
    w = redis.call('HMGET', j.key, 'webhook', 'webhook_id')
  end
  if not w[1] or w[1] == '' then
    return
  end
  if not tx.outbox then
    error('transition: job ' .. j.id .. ' has a webhook and its script gave no outbox')
  end
  local n = tonumber(string.match(w[2] or '', '_(%d+)$') or '0') + 1
  for _, v in ipairs({'webhook_id', 'msg_' .. j.id .. '_' .. n, 'webhook_state', 'pending',
    'webhook_attempts', '0', 'webhook_first_at', '', 'webhook_tries', '[]'}) do
    fields[#fields + 1] = v
  end
  redis.call('ZADD', tx.outbox, tx.now_s, j.tenant .. '/' .. j.id)
end

-- An ended job is folded a while after its end (fold, run by the workers'
-- reapers: internal/store/exec_fold.go), to cost little for the rest of its
-- retention: a job gets no more events until a retry. Its events leave
-- their stream or its states field (a stream costs a few hundred bytes of its own and a node
-- preallocated to stream-node-max-bytes, 4 KB by default), and every field
-- longer than a listpack takes (listpack_value) leaves its hash, into one
-- string, {q:Q}:folded:<id>: JSON {"f": {name: value, ...}, "E": [events]},
-- E three strings per event in order: its stream id, type and data,
-- packed (fold says how; a version before wrote them unpacked as e). The
-- hash is then written anew with its short fields and folded "1", so Redis
-- makes it a listpack (~20 bytes a field) where one long value had made it
-- a hashtable (~70 bytes a field; Redis never turns one back by itself).
-- Every reader sees the job as before: the scripts through record and
-- fields_of, package job merges the folded fields itself (Get, List) and
-- reads the events from there (Events). A move out of the ended state puts
-- it all back first (expand), events with their ids, so a replay is the
-- same before and after and the new events follow them.
--
-- A field written after the fold (webhook_record's webhook_tries) goes to
-- the hash, whose fields win over the folded ones. concurrency_keys stays
-- in the hash, long or not: callers read it to name the job's lane key
-- before they run a script on it (job.Store's Cancel, Retry, Signal).
--
-- fold_max and fold_max_bytes are the most events, and bytes of their
-- data as packed and of the long fields, a job may have to be folded: a
-- long stream is mostly events, so folding it would save little, hold
-- Redis long, and make every read of the job (Get, List) read the whole
-- folded string. An LLM job's deltas, packed, are a few bytes each.
local fold_max, fold_max_bytes = 100, 16384

-- listpack_value is hash-max-listpack-value as Redis ships it: a hash with
-- a longer value (or field name) is a hashtable. The fold keeps to the
-- default rather than read the server's (managed Redis may hide CONFIG).
local listpack_value = 64

-- folded_empty are the fields a fold drops when they are "" (each costs
-- a few bytes even in a listpack) and expand writes back as "": every
-- reader of an ended job takes them as "" when absent, and those of a job
-- running again (the claim) find them as before.
local function folded_empty()
  return {'trace', 'exec_trace', 'metadata', 'error', 'result', 'schedule', 'cost', 'webhook'}
end

-- packed_values returns the values of a state event's job array, values
-- (its JSON between the outer quotes), joined by commas, each that the
-- job's hash holds as it is (current, in event_names' order) written "="
-- (see fold); or nil when a value holds a quote, a backslash or a comma.
-- refers_to undoes the "=" with the values of the hash, vals, in
-- event_names' order (as package job's unpackEvents, a "=" past them is
-- an error).
local function packed_values(values, current)
  local out, k = {}, 0
  for v in string.gmatch(values .. '","', '(.-)","') do
    if v:find('[",\\]') then
      return nil
    end
    k = k + 1
    if v ~= '' and current[k] == v then
      v = '='
    end
    out[k] = v
  end
  return table.concat(out, ',')
end

local function refers_to(list, vals)
  local out, k, n = {}, 0, #event_names()
  for v in string.gmatch(list .. ',', '([^,]*),') do
    k = k + 1
    if v == '=' then
      if k > n then
        error('transition: a packed state event refers to a job value it has not: ' .. list)
      end
      v = vals[k] or ''
    end
    out[k] = v
  end
  return table.concat(out, ',')
end

-- fold folds job j ({key, events, folded, expire_at}), which has ended, as
-- described above, its folded key to expire at expire_at (Unix ms), and
-- reports whether it did: not when it has no events (folded
-- already, by this version or an older one), more than fold_max, or more
-- than fold_max_bytes to move.
--
-- The events go to E packed, three strings each as in flat: an id after
-- the first as "+<ms after the one before>", with "-<seq>" when its
-- sequence is not 0; a state event (state_data) whose job values hold no
-- quote, backslash or comma as type "s" and data
-- "<state>,<attempt>,<value>,<value>,...", none of its JSON's quotes
-- (which the folded key's JSON would escape again), and each value that
-- the job's hash holds as it is (event_names: the job's last execution,
-- which its last events show again) as "=", which no value is (digits,
-- ids, a worker id, "" or JSON with quotes); an output event whose
-- text is a run of the result's bytes, as an LLM job's deltas are, as
-- type "o" and data "<offset>,<length>" of that run in the field result
-- (bytes, from 0). expand unpacks them, and package job (folded.events).
local function fold(j)
  local h = redis.call('HGETALL', j.key)
  local states = false
  for i = 1, #h, 2 do
    if h[i] == 'states' then
      states = h[i + 1]
      break
    end
  end
  local entries = redis.call('XRANGE', j.events, '-', '+', 'COUNT', fold_max + 1)
  local flat = job_events(states, entries)
  if #flat == 0 or #flat > 3 * fold_max then
    return false
  end
  local empty = {}
  for _, name in ipairs(folded_empty()) do
    empty[name] = true
  end
  local kept, moved, bytes, held, implied = {'folded', '1'}, {}, 0, {}, implied()
  for i = 1, #h, 2 do
    local name, value = h[i], h[i + 1]
    held[name] = value
    if name == 'folded' or name == 'events' then
      return false -- folded already: a stream came back under it
    elseif name == 'states' then -- its events, in flat now
    elseif (#value > listpack_value or #name > listpack_value) and name ~= 'concurrency_keys' then
      bytes = bytes + #value
      moved[name] = value
    elseif (value ~= '' or not empty[name]) and value ~= implied[name] then
      kept[#kept + 1], kept[#kept + 2] = name, value
    end
  end
  local result, packed, prev, at = moved.result or '', {}, nil, 1
  local current = {} -- the job's event values as its hash holds them, in event_names' order
  for k, name in ipairs(event_names()) do
    current[k] = held[name] or implied[name]
  end
  for i = 1, #flat, 3 do
    local id, typ, data = flat[i], flat[i + 1], flat[i + 2]
    local ms, seq = string.match(id, '^(%d+)%-(%d+)$')
    ms = tonumber(ms)
    if prev and ms and ms >= prev then
      id = '+' .. int(ms - prev) .. (seq ~= '0' and '-' .. seq or '')
    end
    prev = ms
    local state, attempt, values = string.match(data, '^{"state":"(%a+)","attempt":(%d+),"job":%["(.*)"%]}$')
    local list = typ == 'state' and state and packed_values(values, current)
    if list then
      typ, data = 's', state .. ',' .. attempt .. ',' .. list
    elseif typ == 'output' and #data > 11 and data:sub(1, 9) == '{"text":"' and data:sub(-2) == '"}' then
      local text = data:sub(10, -3)
      -- Deltas follow on in the result, but those of an earlier attempt
      -- start it again.
      local from = string.find(result, text, at, true) or string.find(result, text, 1, true)
      if from then
        at = from + #text
        typ, data = 'o', int(from - 1) .. ',' .. int(#text)
      end
    end
    packed[i], packed[i + 1], packed[i + 2] = id, typ, data
    bytes = bytes + #data
  end
  if bytes > fold_max_bytes then
    return false
  end
  redis.call('DEL', j.key, j.events)
  redis.call('HSET', j.key, unpack(kept))
  redis.call('SET', j.folded, cjson.encode({f = moved, E = packed}), 'PXAT', int(j.expire_at))
  return true
end

-- unfolded returns the fields a fold moved into the folded key folded, by
-- name.
local function unfolded(folded)
  local packed = redis.call('GET', folded)
  return packed and cjson.decode(packed).f or {}
end

-- packed returns the tenant of the job packed in folded, its folded key,
-- or nil when it is not packed. A packed job has its hash and folded key
-- in one, compressed, which Go alone reads, and no hash; its tenant is in
-- its value's head (package scripts' Pack).
local function packed(folded)
  local head = redis.call('GETRANGE', folded, 0, 65)
  local nul = head:byte(1) == 1 and head:find('\0', 2, true)
  return nul and head:sub(2, nul - 1) or nil
end

-- packed_for says whether folded holds a packed job of tenant ("" = admin,
-- any tenant): one a script unpacks first (unpack_first). Another tenant's
-- is as absent to the caller as one that never existed, and stays packed.
local function packed_for(folded, tenant)
  local owner = packed(folded)
  return owner ~= nil and (tenant == '' or owner == tenant)
end

-- unpack_first is the reply of a script that found packed jobs where it
-- needs their fields, before it wrote anything: KEYS[at[1]] the first
-- one's hash, KEYS[at[2]] its folded key, and so on. Go writes each back
-- as it was before the packing (job_unpack.lua) and runs the script again
-- (scripts.PackedKeys).
local function unpack_first(at)
  local list = {}
  for i = 1, #at, 2 do
    list[#list + 1] = at[i] .. ',' .. at[i + 1]
  end
  return redis.error_reply('LEASEHOLD_PACKED ' .. table.concat(list, ' '))
end

-- record returns job hash key as HGETALL reads it, and as it read before
-- the fold: with the fields the fold moved into folded (those the hash
-- holds win: written since), without the marker. The implied fields it
-- lacks stay absent: ParseRecord reads them as usual.
local function record(key, folded)
  local h = redis.call('HGETALL', key)
  local at
  for i = 1, #h, 2 do
    if h[i] == 'folded' then
      at = i
      break
    end
  end
  if not at then
    return h
  end
  table.remove(h, at)
  table.remove(h, at)
  local has = {}
  for i = 1, #h, 2 do
    has[h[i]] = true
  end
  for name, value in pairs(unfolded(folded)) do
    if not has[name] then
      h[#h + 1], h[#h + 2] = name, value
    end
  end
  return h
end

-- fields_of is HMGET of names (a list) on job hash key, as it read before
-- the fold: a field the hash lacks is read from folded, or is implied.
local function fields_of(key, folded, names)
  local values = redis.call('HMGET', key, 'folded', unpack(names))
  local moved, usual = table.remove(values, 1) and unfolded(folded) or {}, implied()
  for i, name in ipairs(names) do
    values[i] = values[i] or moved[name] or usual[name] or false
  end
  return values
end

-- expand puts back what fold moved out of job j ({key, events, folded}):
-- its events in its stream, its long fields in its hash (but those written
-- since), and the empty fields it dropped as "". A job folded by an older
-- version, before the folded key, has its events in its hash's field
-- events instead.
local function expand(j)
  local m = redis.call('HMGET', j.key, 'folded', 'events')
  local flat, moved
  if m[1] then
    local packed = redis.call('GET', j.folded)
    local f = packed and cjson.decode(packed) or {f = {}, e = {}}
    flat, moved = f.e or {}, f.f
    -- Unpacked as fold packed them; folded by an older version, they are
    -- in e as they were.
    local result, prev, vals = moved.result or '', 0, nil
    for i = 1, #(f.E or {}), 3 do
      local id, typ, data = f.E[i], f.E[i + 1], f.E[i + 2]
      local d, seq = string.match(id, '^%+(%d+)%-?(%d*)$')
      if d then
        prev = prev + tonumber(d)
        id = int(prev) .. '-' .. (seq ~= '' and seq or '0')
      else
        prev = tonumber(string.match(id, '^(%d+)'))
      end
      if typ == 's' then
        local state, attempt, list = string.match(data, '^([^,]*),([^,]*),(.*)$')
        if list:find('=', 1, true) then
          if not vals then
            local names = event_names()
            vals = redis.call('HMGET', j.key, unpack(names))
            local usual = implied()
            for k, name in ipairs(names) do
              vals[k] = vals[k] or moved[name] or usual[name] -- a long worker id left the hash
            end
          end
          list = refers_to(list, vals)
        end
        typ, data = 'state', '{"state":"' .. state .. '","attempt":' .. attempt .. ',"job":["' ..
          (list:gsub(',', '","')) .. '"]}'
      elseif typ == 'o' then
        local from, n = string.match(data, '^(%d+),(%d+)$')
        typ, data = 'output', '{"text":"' .. result:sub(from + 1, from + n) .. '"}'
      end
      flat[i], flat[i + 1], flat[i + 2] = id, typ, data
    end
    redis.call('DEL', j.folded)
    redis.call('HDEL', j.key, 'folded')
  elseif m[2] then
    flat, moved = cjson.decode(m[2]), {}
    redis.call('HDEL', j.key, 'events')
  else
    return
  end
  for i = 1, #flat, 3 do
    redis.call('XADD', j.events, flat[i], 'type', flat[i + 1], 'data', flat[i + 2])
  end
  local names = folded_empty()
  for name in pairs(moved) do
    names[#names + 1] = name
  end
  local values, back = redis.call('HMGET', j.key, unpack(names)), {}
  for k = 1, #names do
    if not values[k] then
      back[#back + 1], back[#back + 2] = names[k], moved[names[k]] or ''
    end
  end
  if #back > 0 then
    redis.call('HSET', j.key, unpack(back))
  end
end

-- move moves job j ({key, events, id, tenant, state, and optionally
-- webhook: its fields webhook and webhook_id, read with the caller's
-- own, which spares deliver a read; folded, the job's folded key, in
-- a script that moves it out of an ended state; and checkpoint, its
-- checkpoint ("" for none), in a move to waiting}: state is '' for a job not yet created) to state to, writing fields (a flat list: name,
-- value, ...; move adds to it) with it. attempt is the job's attempt after
-- the move, and shown its shown fields (see above; nil for a job's first
-- move, whose event is always submitted's). A move may_move refuses
-- is a bug in the caller, which decided on it: it raises, before
-- anything of j is written.
local function move(tx, j, to, fields, attempt, shown)
  local from = j.state
  if not may_move(from, to) then
    error('transition: job ' .. j.id .. ' cannot move from "' .. from .. '" to ' .. to)
  end
  local finished_at, ending, leaving = '', terminal(to), terminal(from)
  if ending then
    finished_at = tx.now_s
    deliver(tx, j, fields)
  end
  if ending or leaving then
    fields[#fields + 1], fields[#fields + 2] = 'finished_at', finished_at
  end
  if leaving then
    expand(j)
  end
  local states = j.states
  if states == nil then
    states = redis.call('HGET', j.key, 'states')
  end
  local data = submitted
  if from ~= '' then
    data = state_data(to, attempt, finished_at, shown, to == 'waiting' and wait_of(fields, j.checkpoint) or nil)
  end
  local id
  if states and #states + #data < states_max then
    id = next_state_id(states, tx.now, tx.now_s)
    states = id .. ' ' .. kept_data(data) .. '\n' .. states
    fields[#fields + 1], fields[#fields + 2] = 'states', states
  elseif states then
    stream_states(j, states)
    states = false
  end
  redis.call('HSET', j.key, 'state', to, unpack(fields))
  if not id then
    id = redis.call('XADD', j.events, 'MAXLEN', '~', tx.maxlen, '*', 'type', 'state', 'data', data)
  end
  j.state, j.states = to, states
  if from ~= '' then
    count(tx, j.tenant, from, -1)
  end
  count(tx, j.tenant, to, 1)
  if ending then
    tx.retiring[#tx.retiring + 1], tx.retiring[#tx.retiring + 2] = tx.retire_at, j.id
  elseif leaving then
    tx.unretiring[#tx.unretiring + 1] = j.id
  end
  return id
end

-- forget deletes terminal jobs ids: their records, events and folded
-- keys (keys, a flat list), their listing entries (indexes[k]: the
-- tenant's index that lists ids[k]), their entries in retired, and gives
-- back their charges (charges[k]: the tenant's retained bytes, stats.lua).
local function forget(retired, ids, keys, indexes, charges)
  redis.call('DEL', unpack(keys))
  redis.call('ZREM', retired, unpack(ids))
  for k, id in ipairs(ids) do
    redis.call('ZREM', indexes[k], id)
    give_back(charges[k], id)
  end
end

-- settle writes what the moves of tx changed in the stats hash, the
-- retired index and the usage: a few commands for the whole script.
local function settle(tx)
  write_counts(tx.stats, tx.counts)
  write_usage(tx)
  for state, n in pairs(tx.ended) do
    count_finished(tx.stats, tx.now, state, n)
  end
  if #tx.retiring > 0 then
    redis.call('ZADD', tx.retired, unpack(tx.retiring))
  end
  if #tx.unretiring > 0 then
    redis.call('ZREM', tx.retired, unpack(tx.unretiring))
  end
end
