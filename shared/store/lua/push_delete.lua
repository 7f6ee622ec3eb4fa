-- push_delete: deletes one push notification config of a task and its cursor; the task's
-- last config takes its outbox with it (a due entry left behind is dropped by the next
-- release, which finds no configs). Idempotent.
--
-- What a terminal task's keys free leaves its retained bytes (push_bytes.lua).
--
-- KEYS[1] configs  KEYS[2] cursors  KEYS[3] outbox  KEYS[4] task  KEYS[5 .. 7] the
--   retained-task keys (terminal, its sizes, their sum: evict_terminal.lua's retained_keys)
-- ARGV[1] config id  ARGV[2] task id
-- Returns 1 deleted | 0 there was no such config.
-- @include "push_bytes"
-- @include "evict_terminal"

local configs, cursors, outbox = KEYS[1], KEYS[2], KEYS[3]
local push = {configs = configs, cursors = cursors, outbox = outbox}
local retained = retained_keys(KEYS, 5)
local task_id = ARGV[2]
local counted = push_counted(KEYS[4], retained, task_id)
local before = 0
if counted then before = push_size(push) end
local deleted = redis.call('HDEL', configs, ARGV[1])
redis.call('HDEL', cursors, ARGV[1])
if redis.call('EXISTS', configs) == 0 then
  redis.call('DEL', cursors, outbox)
end
if counted and deleted == 1 then
  push_retained(retained, counted, push_size(push) - before)
end
return deleted
