-- push_release: ends a deliverer's claim on a task. Drops the outbox's first `trim` events
-- (delivered to, or given up by, every config), then: a task whose configs are gone leaves
-- nothing behind; a finished task (its terminal event delivered to every config, or the task
-- gone) drops its outbox and keeps its configs as long as the task itself (its TTL, read
-- here); else the task
-- is due again now when events arrived during the claim or are left to send, after `delay`
-- when every config left waits on a retry, or not at all when nothing is left.
--
-- KEYS[1] due  KEYS[2] outbox  KEYS[3] configs  KEYS[4] cursors  KEYS[5] task
-- KEYS[6 .. 8] the retained-task keys (terminal, its sizes, their sum: evict_terminal.lua)
-- ARGV[1] task id  ARGV[2] trim  ARGV[3] outbox length when read
-- ARGV[4] delay ms of the earliest retry ('' for none)  ARGV[5] '1' when finished, else ''
-- Whatever this frees of a terminal task's push keys leaves its retained bytes (push_bytes.lua).
-- Returns the events left in the outbox.
-- @include "now_ms"
-- @include "push_bytes"
-- @include "evict_terminal"

local due, outbox, configs, cursors, task = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local push = {configs = configs, cursors = cursors, outbox = outbox}
local retained = retained_keys(KEYS, 6)
local id, trim, read = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local counted = push_counted(task, retained, id)
local before = 0
if counted then before = push_size(push) end

local function release()
  if trim > 0 then redis.call('LTRIM', outbox, trim, -1) end
  if redis.call('EXISTS', configs) == 0 then
    redis.call('DEL', outbox, cursors)
    redis.call('ZREM', due, id)
    return 0
  end
  local left = redis.call('LLEN', outbox)
  local arrived = left > read - trim
  if ARGV[5] ~= '' and not arrived then
    redis.call('DEL', outbox)
    local ttl = redis.call('PTTL', task)
    if ttl > 0 then
      redis.call('PEXPIRE', configs, ttl)
      redis.call('PEXPIRE', cursors, ttl)
    elseif ttl == -2 then
      redis.call('DEL', configs, cursors)
    end
    redis.call('ZREM', due, id)
    return 0
  end
  local now = now_ms()
  if arrived then
    redis.call('ZADD', due, now, id)
  elseif ARGV[4] ~= '' then
    redis.call('ZADD', due, now + tonumber(ARGV[4]), id)
  elseif left > 0 then
    redis.call('ZADD', due, now, id)
  else
    redis.call('ZREM', due, id)
  end
  return left
end

local left = release()
if counted then push_retained(retained, counted, push_size(push) - before) end
return left
