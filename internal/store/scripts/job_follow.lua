-- Gives a job its stream before a reader waits on it for the next event
-- (states.lua): its events kept in its hash move into the stream, and every
-- later one is appended there, where XREAD BLOCK sees it.
-- KEYS[1] job hash   KEYS[2] events
-- (followCall in internal/store/job_calls.go is the one place in Go that lays these KEYS
-- out: change the two together.)
-- Returns 1 when it moved events, 0 when the job had none in its hash (it
-- has its stream already, is folded, or does not exist).
local states = redis.call('HGET', KEYS[1], 'states')
if not states then
  return 0
end
stream_states({key = KEYS[1], events = KEYS[2]}, states)
return 1
