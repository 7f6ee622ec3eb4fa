-- push_size(push), push_counted(task, retained, id) and push_retained(retained, member, delta):
-- a task's push notification keys (push/mod.rs: configs, cursors, outbox) in its retained bytes
-- (create.lua's max retained bytes). finish_task.lua counts them when the task finishes; a
-- script that changes them once the task is terminal (a config put or deleted, an outbox
-- trimmed or dropped) moves the task's recorded size and the shard's sum by as much, so
-- eviction takes back exactly what was added and no config a caller adds to a finished task
-- escapes the budget. A live task costs the check one HMGET: it is measured when it finishes.
-- Every key here is one its caller declares: `push` holds the task's configs, outbox and
-- cursors (push_keys in push_outbox.lua, or the script's own), `task` its record, `retained`
-- the shard's retained-task keys (retained_keys in evict_terminal.lua: `Keys::retained`).

-- The bytes the task's push keys take now (SAMPLES 0: every field and entry).
local function push_size(push)
  local size = 0
  for _, key in ipairs({push.configs, push.cursors, push.outbox}) do
    size = size + (redis.call('MEMORY', 'USAGE', key, 'SAMPLES', 0) or 0)
  end
  return size
end

-- The task's entry in `terminal:sizes` (`<owner hash>:<id>`, finish_task.lua) when it is
-- terminal and counted, else nil.
local function push_counted(task, retained, id)
  local f = redis.call('HMGET', task, 'ow', 'ph')
  -- finish_task drops the phase: a record without one is terminal.
  if not f[1] or f[2] then return nil end
  local member = f[1] .. ':' .. id
  if not redis.call('HGET', retained.terminal_sizes, member) then return nil end
  return member
end

-- Adds `delta` bytes to counted entry `member`'s size and to the shard's sum.
local function push_retained(retained, member, delta)
  if not member or delta == 0 then return end
  redis.call('HINCRBY', retained.terminal_sizes, member, delta)
  if redis.call('INCRBY', retained.terminal_bytes, delta) <= 0 then
    redis.call('DEL', retained.terminal_bytes)
  end
end
