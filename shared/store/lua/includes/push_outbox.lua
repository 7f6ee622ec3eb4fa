-- @include "now_ms"
-- push_outbox(push, message, has_push): when the task has push notification configs (`push/mod.rs`),
-- keeps the event for their deliveries: appends `message` ("<seq>|<event>|<data>") to the
-- task's outbox and marks the task due in its shard, in the same script as the transition
-- that published it, so no crash can publish an event and lose its delivery. A task without
-- configs pays one EXISTS, or nothing when the caller already knows (has_push true or false;
-- nil: ask).
-- `push` holds the task's push keys, which every script that publishes its events declares
-- (push_keys, from `Keys::push_of`), and its id.
-- The outbox is bounded (PUSH_OUTBOX_MAX events): past it the oldest undelivered event is
-- dropped, so a receiver that is down cannot make one streaming task hold unbounded memory;
-- each drop is counted in the shard's `push-dropped` counter, which the deliverers take
-- (GETDEL, push/mod.rs) into `taskcluster.push.outbox.dropped`.
-- The configs and cursors of a task that is still publishing never expire (a config created
-- ahead of its task expires unless the creation's event reaches here).
local PUSH_OUTBOX_MAX = 1000

-- PUSH_KEYS, push_keys(keys, from, id): the PUSH_KEYS push keys of task `id` declared at
-- keys[from ..]: configs, outbox, cursors, the shard's due set and dropped counter
-- (`Keys::push_of`).
local PUSH_KEYS = 5
local function push_keys(keys, from, id)
  return {
    configs = keys[from], outbox = keys[from + 1], cursors = keys[from + 2], due = keys[from + 3],
    dropped = keys[from + 4], id = id,
  }
end

local function push_outbox(push, message, has_push)
  if has_push == nil then has_push = redis.call('EXISTS', push.configs) == 1 end
  if not has_push then return end
  -- Stamped with the store's clock ("<ms>|<seq>|<event>|<data>"): a delivery made after the
  -- run ended still says when its event happened (`store::push::OutboxEvent`).
  local now = now_ms()
  if redis.call('RPUSH', push.outbox, now .. '|' .. message) > PUSH_OUTBOX_MAX then
    redis.call('LPOP', push.outbox)
    redis.call('INCR', push.dropped)
  end
  redis.call('PERSIST', push.configs)
  redis.call('PERSIST', push.cursors)
  redis.call('ZADD', push.due, 'NX', now, push.id)
end
