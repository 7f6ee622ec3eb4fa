-- push_put: stores (or replaces) one push notification config of a task, with the cursor its
-- deliveries start from. A config for an existing task delivers the events after the task's
-- current one; a config stored ahead of its task ('pending': the inline config of a send, put
-- before the task is created so that none of its events can slip past) starts at the
-- beginning and expires after ttl unless the task publishes an event (push_outbox) or the
-- config is put again once the task exists. A replaced config keeps its cursor.
--
-- The task's record keeps the client address of the latest put (`pa`): push_claim.lua shares
-- delivery slots by address. A put on a terminal task adds what it stores to the task's
-- retained bytes (push_bytes.lua).
--
-- KEYS[1] task  KEYS[2] configs  KEYS[3] cursors  KEYS[4] outbox  KEYS[5 .. 7] the
--   retained-task keys (terminal, its sizes, their sum: evict_terminal.lua's retained_keys)
-- ARGV[1] config id  ARGV[2] config (opaque)  ARGV[3] most configs per task
-- ARGV[4] 'existing' | 'pending'  ARGV[5] ttl ms of a pending config  ARGV[6] task id
-- ARGV[7] the caller's client address ('' for none)
-- Returns 1 stored | 0 no such task ('existing') | -1 the task has its most configs already.
-- @include "push_bytes"
-- @include "evict_terminal"

local task, configs, cursors = KEYS[1], KEYS[2], KEYS[3]
local push = {configs = configs, cursors = cursors, outbox = KEYS[4]}
local retained = retained_keys(KEYS, 5)
local id, config, most, mode = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4]
local task_id, source = ARGV[6], ARGV[7]
local seq, terminal = 0, false
if mode == 'existing' then
  local f = redis.call('HMGET', task, 'sq', 'ph')
  if not f[1] then return 0 end
  seq = tonumber(f[1])
  -- finish_task drops the phase: a task without one is terminal.
  terminal = not f[2]
end
if redis.call('HEXISTS', configs, id) == 0 and redis.call('HLEN', configs) >= most then
  return -1
end
local counted, before = nil, 0
if terminal then counted = push_counted(task, retained, task_id) end
if counted then before = push_size(push) end
redis.call('HSET', configs, id, config)
if redis.call('HEXISTS', cursors, id) == 0 then
  redis.call('HSET', cursors, id, cjson.encode({s = seq}))
end
if mode == 'pending' then
  redis.call('PEXPIRE', configs, ARGV[5])
  redis.call('PEXPIRE', cursors, ARGV[5])
elseif terminal then
  -- Nothing more to deliver: the config is kept for reading as long as its task.
  local ttl = redis.call('PTTL', task)
  if ttl > 0 then
    redis.call('PEXPIRE', configs, ttl)
    redis.call('PEXPIRE', cursors, ttl)
  end
else
  redis.call('PERSIST', configs)
  redis.call('PERSIST', cursors)
end
if mode == 'existing' and source ~= '' then
  redis.call('HSET', task, 'pa', source)
end
if counted then push_retained(retained, counted, push_size(push) - before) end
return 1
