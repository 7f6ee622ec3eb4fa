-- publish_event(channel, seq, event, data_json): announces event number seq on the owner's task
-- channel without logging it. For the events a task's record rebuilds exactly (its terminal
-- event: see `redis/event_log.rs`), so a retained task keeps no copy of its result in a log.
-- Messages read "<seq>|<event>|<data>", as log entries do.
local function publish_event(channel, seq, event, data_json)
  redis.call('PUBLISH', channel, seq .. '|' .. event .. '|' .. data_json)
  return seq
end
