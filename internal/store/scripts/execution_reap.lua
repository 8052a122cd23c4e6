-- Does one duty of a queue's due work (due.lua) for the jobs the reaper
-- found due (store.FindDue, which only read): each job is checked again.
-- KEYS[1] scheduled   KEYS[2] leases   KEYS[3] deadlines   KEYS[4] fair
-- (fair.lua)   KEYS[5] ready   KEYS[6] stats (stats.lua, finished.lua)
-- KEYS[7] retired   KEYS[8] the usage day the executions lost are counted
-- in (stats.lua)   KEYS[9] the webhook outbox (transition.lua)
-- for the duty 'delete', KEYS[10 + 5(k - 1)] job hash, then its events,
-- tenant index, folded key and the tenant's retained bytes (stats.lua) of
-- job k (1..n); for the others, KEYS[7 + 3k] job hash, KEYS[8 + 3k] events
-- and KEYS[9 + 3k] lane (fair.lua) of job k
-- ARGV[1] the duty: 'rescue' (lease expired), 'promote' (scheduled and
-- due: a delay, a retry's backoff, a wait's timeout), 'expire' (max_wait
-- passed) or 'delete' (retention ended)
-- ARGV[2] retention_ms (of a job that turns terminal)   ARGV[3] events
-- MAXLEN   ARGV[4] backoff_ms before retrying a job whose lease expired
-- ARGV[5] when the usage day's counts are dropped (unix ms; "" = not
-- counted)
-- ARGV[6 ..] for 'delete', the n job ids; for the others, ARGV[4 + 2k]
-- the id and ARGV[5 + 2k] the lane's name of job k
-- (reapArgs in internal/store/exec_reap.go is the one place in Go that
-- lays these KEYS and ARGV out: change the two together.)
-- Returns {done, expired}: how many jobs the duty changed, and, for
-- 'expire', the lane of each job expired.
local scheduled, leases, deadlines, fair, ready = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local stats, retired = KEYS[6], KEYS[7]
local duty, retention, maxlen = ARGV[1], ARGV[2], ARGV[3]

local now = redis_now()
local tx = transitions(stats, retired, now, retention, maxlen, KEYS[9])
use_day(tx, KEYS[8], ARGV[5])
local d = {leases = leases, scheduled = scheduled, deadlines = deadlines, fair = fair, ready = ready, now = now,
  backoff = tonumber(ARGV[4]), tx = tx}

local done, expired = 0, {}
if duty == 'delete' then
  local ids = {}
  for k = 6, #ARGV do
    ids[#ids + 1] = ARGV[k]
  end
  done = due_delete_retired(d, retired, ids, 10)
elseif duty == 'rescue' or duty == 'promote' or duty == 'expire' then
  for k = 1, (#ARGV - 5) / 2 do
    local c = due_read(k, ARGV[4 + 2 * k], KEYS[7 + 3 * k], KEYS[8 + 3 * k], KEYS[9 + 3 * k], ARGV[5 + 2 * k], true)
    if not c.state then
      due_gone(d, c.id)
    elseif duty == 'rescue' then
      done = done + (due_reap(d, c) and 1 or 0)
    elseif duty == 'promote' then
      done = done + (due_promote(d, c) and 1 or 0)
    else
      due_expire(d, c, expired)
      done = #expired
    end
  end
else
  return redis.error_reply('ERR unknown duty ' .. tostring(duty))
end
settle(tx)
return {done, expired}
