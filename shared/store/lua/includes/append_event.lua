-- @include "log_event"
-- append_event(task_key, events_key, channel, event, data_json, log_len, push): numbers the event with
-- the task's next sequence number and logs and publishes it (log_event). For writes that change
-- nothing else in the record (emit); transitions set seq in their own HSET.
local function append_event(task_key, events_key, channel, event, data_json, log_len, push)
  local seq = redis.call('HINCRBY', task_key, 'sq', 1)
  local notify = redis.call('HGET', task_key, 'nc')
  return log_event(events_key, channel, seq, event, data_json, log_len, notify, push)
end
