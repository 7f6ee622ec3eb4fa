-- emit: a lease holder appends a custom event (progress, stream output) to its task's log and
-- publishes it. Fenced like every other worker write.
--
-- KEYS[1] task  KEYS[2] events  KEYS[3 .. 7] the task's push keys (push_outbox.lua)
-- ARGV[1] holder id  ARGV[2] epoch  ARGV[3] event name  ARGV[4] data json  ARGV[5] channel
-- ARGV[6] event log length  ARGV[7] task id
-- Returns the event's sequence number | false when fenced out.

-- @include "now_ms"
-- @include "lease_is_live"
-- @include "append_event"

local task, events = KEYS[1], KEYS[2]
if not lease_is_live(task, ARGV[1], ARGV[2], now_ms()) then return false end
return append_event(task, events, ARGV[5], ARGV[3], ARGV[4], ARGV[6],
  push_keys(KEYS, 3, ARGV[7]))
