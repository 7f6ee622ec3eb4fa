-- retry_later: the lease holder ends its run with a failure that asked for another attempt:
-- active -> backoff. The lease, run deadline and limit go (the holder's later writes are fenced
-- out, recovery no longer sees the lease); the task stays running and live (it keeps its
-- capacity slot), its failure kept in 'le' and its retries counted in 'ry' (recover.lua leaves
-- them out of the abandoned runs that 'ma' limits). Its due time is kept where a waiting task's
-- deadline is ('ax', and the admissions index, which the sweeps read: once it passed they queue
-- the task again), so nobody polls the task while it waits. Publishes nothing: the task stays
-- running. Field names: redis/fields.rs.
--
-- KEYS[1] task  KEYS[2] leases  KEYS[3] admissions
-- ARGV[1] task id  ARGV[2] holder id  ARGV[3] epoch  ARGV[4] error json  ARGV[5] delay ms
-- Returns the task's due time (ms, Redis clock) | false when fenced out (or not active).

-- @include "now_ms"
-- @include "num_str"
-- @include "lease_is_live"

local task, leases, admissions = KEYS[1], KEYS[2], KEYS[3]
local now = now_ms()
if not lease_is_live(task, ARGV[2], ARGV[3], now) then return false end
if redis.call('HGET', task, 'ph') ~= 'active' then return false end
local due = now + tonumber(ARGV[5])
redis.call('HINCRBY', task, 'ry', 1)
local due_s = num_str(due)
redis.call('HSET', task, 'ph', 'backoff', 'le', ARGV[4], 'up', num_str(now), 'ax', due_s,
  'ls', lease_dropped(ARGV[3]))
redis.call('HDEL', task, 'lo')
redis.call('ZREM', leases, ARGV[1])
redis.call('ZADD', admissions, due_s, ARGV[1])
return due
