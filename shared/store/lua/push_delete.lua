-- push_delete: deletes one push notification config of a task and its cursor; the task's
-- last config takes its outbox with it (a due entry left behind is dropped by the next
-- release, which finds no configs). Idempotent.
--
-- KEYS[1] configs  KEYS[2] cursors  KEYS[3] outbox
-- ARGV[1] config id
-- Returns 1 deleted | 0 there was no such config.

local configs, cursors, outbox = KEYS[1], KEYS[2], KEYS[3]
local deleted = redis.call('HDEL', configs, ARGV[1])
redis.call('HDEL', cursors, ARGV[1])
if redis.call('EXISTS', configs) == 0 then
  redis.call('DEL', cursors, outbox)
end
return deleted
