-- append_event(task_key, events_key, channel, event, data_json, log_len): numbers the event with
-- the task's next sequence number, keeps it in the task's short event log (the last log_len
-- entries) and publishes it on the owner's task channel. Entries read "<seq>|<event>|<data>".
local function append_event(task_key, events_key, channel, event, data_json, log_len)
  local seq = redis.call('HINCRBY', task_key, 'seq', 1)
  local entry = seq .. '|' .. event .. '|' .. data_json
  redis.call('RPUSH', events_key, entry)
  redis.call('LTRIM', events_key, -tonumber(log_len), -1)
  redis.call('PUBLISH', channel, entry)
  return seq
end
