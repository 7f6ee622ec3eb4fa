-- @include "push_outbox"
-- @include "num_str"
-- publish_event(channel, seq, event, data_json, notify, push, has_push): announces event number seq on the
-- owner's task channel without logging it. For the events a task's record rebuilds exactly (its
-- terminal event: see `redis/event_log.rs`), so a retained task keeps no copy of its result in a
-- log. Messages read "<seq>|<event>|<data>", as log entries do.
-- notify: the channel of the process that created the task and follows it (the record's `nc`,
-- create.lua), or nil. That process subscribed its channel once and routes each message by the
-- task channel it names, "<length of channel>:<channel><message>", so following a task it
-- created costs it no SUBSCRIBE and no UNSUBSCRIBE; anyone else following the task listens on
-- the task channel itself.
-- Every event of a task with push notification configs is also kept for their deliveries
-- (push_outbox; `push`: the task's push keys, push_keys; `has_push`: whether it has configs,
-- when the caller already knows, else nil).
local function publish_event(channel, seq, event, data_json, notify, push, has_push)
  local message = num_str(seq) .. '|' .. event .. '|' .. data_json
  redis.call('PUBLISH', channel, message)
  if notify then
    redis.call('PUBLISH', notify, num_str(#channel) .. ':' .. channel .. message)
  end
  push_outbox(push, message, has_push)
  return seq
end
