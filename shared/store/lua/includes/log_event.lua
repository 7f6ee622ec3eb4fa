-- @include "publish_event"
-- log_event(events_key, channel, seq, event, data_json, log_len, notify, push): keeps event number seq
-- in the task's short event log (the last log_len entries) and publishes it on the owner's task
-- channel (and on `notify`: see publish_event). The caller has stored seq in the task record, in
-- the HSET of its transition. Entries read "<seq>|<event>|<data>". Only events the record cannot
-- rebuild are logged (a worker's own events; see `redis/event_log.rs`): creation and terminal
-- events are not.
local function log_event(events_key, channel, seq, event, data_json, log_len, notify, push)
  redis.call('RPUSH', events_key, num_str(seq) .. '|' .. event .. '|' .. data_json)
  redis.call('LTRIM', events_key, -tonumber(log_len), -1)
  return publish_event(channel, seq, event, data_json, notify, push)
end
