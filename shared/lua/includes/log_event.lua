-- log_event(events_key, channel, seq, event, data_json, log_len): keeps event number seq in the
-- task's short event log (the last log_len entries) and publishes it on the owner's task
-- channel. The caller has stored seq in the task record, in the HSET of its transition.
-- Entries read "<seq>|<event>|<data>".
local function log_event(events_key, channel, seq, event, data_json, log_len)
  local entry = seq .. '|' .. event .. '|' .. data_json
  redis.call('RPUSH', events_key, entry)
  redis.call('LTRIM', events_key, -tonumber(log_len), -1)
  redis.call('PUBLISH', channel, entry)
  return seq
end
