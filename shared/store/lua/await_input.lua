-- await_input: the lease holder ends its run without finishing the task: active -> waiting.
-- The lease, run deadline and limit go (the holder's later writes are fenced out, recovery no
-- longer sees the task); the task stays running and live (it keeps its capacity slot) with
-- what the run asks for in 'iq', until its waiting deadline: kept where an admission's is
-- ('ax', and the admissions index, which the sweeps read: past it they fail the task with
-- input_timeout). Logs and publishes the 'inputRequired' event, which no record field
-- rebuilds. Field names: redis/fields.rs.
--
-- KEYS[1] task  KEYS[2] events  KEYS[3] leases  KEYS[4] admissions
-- KEYS[5 .. 9] the task's push keys (push_outbox.lua)
-- ARGV[1] task id  ARGV[2] holder id  ARGV[3] epoch  ARGV[4] request json
-- ARGV[5] event data json  ARGV[6] channel  ARGV[7] event log length  ARGV[8] patience ms
-- Returns the event's sequence number | false when fenced out (or not active).

-- @include "now_ms"
-- @include "num_str"
-- @include "lease_is_live"
-- @include "log_event"

local task, events, leases, admissions = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local now = now_ms()
if not lease_is_live(task, ARGV[2], ARGV[3], now) then return false end
if redis.call('HGET', task, 'ph') ~= 'active' then return false end
local seq = redis.call('HINCRBY', task, 'sq', 1)
local deadline = now + tonumber(ARGV[8])
local deadline_s = num_str(deadline)
redis.call('HSET', task, 'ph', 'waiting', 'iq', ARGV[4], 'up', num_str(now), 'ax', deadline_s,
  'ls', lease_dropped(ARGV[3]))
redis.call('HDEL', task, 'lo')
redis.call('ZREM', leases, ARGV[1])
redis.call('ZADD', admissions, deadline_s, ARGV[1])
return log_event(events, ARGV[6], seq, 'inputRequired', ARGV[5], ARGV[7],
  redis.call('HGET', task, 'nc'), push_keys(KEYS, 5, ARGV[1]))
