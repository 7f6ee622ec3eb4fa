-- @include "now_ms"
-- push_outbox(channel, message): when the task has push notification configs (`push/mod.rs`),
-- keeps the event for their deliveries: appends `message` ("<seq>|<event>|<data>") to the
-- task's outbox and marks the task due in its shard, in the same script as the transition
-- that published it, so no crash can publish an event and lose its delivery. A task without
-- configs pays one EXISTS.
-- The key names are derived from the task channel's, `<tag>:ch:<owner hash>:<id>` (keys.rs;
-- an owner hash is hex, so the id is what follows its colon): same hash tag, so the same slot,
-- and none of the scripts that publish events has to declare three more keys.
-- The outbox is bounded (PUSH_OUTBOX_MAX events): past it the oldest undelivered event is
-- dropped, so a receiver that is down cannot make one streaming task hold unbounded memory;
-- each drop is counted in the shard's `push-dropped` counter, which the deliverers take
-- (GETDEL, push/mod.rs) into `taskcluster.push.outbox.dropped`.
-- The configs and cursors of a task that is still publishing never expire (a config created
-- ahead of its task expires unless the creation's event reaches here).
local PUSH_OUTBOX_MAX = 1000

local function push_outbox(channel, message)
  local at = string.find(channel, ':ch:', 1, true)
  if not at then return end
  local prefix = string.sub(channel, 1, at - 1)
  local rest = string.sub(channel, at + 4)
  local colon = string.find(rest, ':', 1, true)
  if not colon then return end
  local id = string.sub(rest, colon + 1)
  local configs = prefix .. ':push:' .. id
  if redis.call('EXISTS', configs) == 0 then return end
  local outbox = prefix .. ':push-out:' .. id
  if redis.call('RPUSH', outbox, message) > PUSH_OUTBOX_MAX then
    redis.call('LPOP', outbox)
    redis.call('INCR', prefix .. ':push-dropped')
  end
  redis.call('PERSIST', configs)
  redis.call('PERSIST', prefix .. ':push-cur:' .. id)
  redis.call('ZADD', prefix .. ':push-due', 'NX', now_ms(), id)
end
