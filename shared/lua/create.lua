-- create: stores a new task (status running) and either queues it or holds it reserved.
--
-- Capacity counts non-terminal tasks cluster-wide (SCARD live). When full, the script reports how
-- many admissions and leases are already due, so the caller reaps them and retries: reaping
-- always happens before capacity is enforced.
--
-- KEYS[1] task      KEYS[2] events     KEYS[3] live        KEYS[4] owner_index
-- KEYS[5] owner_live KEYS[6] queue     KEYS[7] wake        KEYS[8] admissions
-- KEYS[9] leases
-- ARGV[1] task id   ARGV[2] owner hash  ARGV[3] context id ('' for none)
-- ARGV[4] invocation json  ARGV[5] entrypoint  ARGV[6] 'queued' | 'reserved'
-- ARGV[7] admission ttl ms  ARGV[8] max attempts  ARGV[9] max tasks
-- ARGV[10] statusUpdate data json  ARGV[11] channel  ARGV[12] event log length
-- Returns {1, created_ms} | {0, 'DUPLICATE'} | {0, 'CAPACITY', due_count}
-- Emits statusUpdate running (seq 1).

-- @include "now_ms"
-- @include "append_event"
-- @include "ring_doorbell"

local task, events, live, owner_index = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local owner_live, queue, wake, admissions, leases = KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9]
local id, owner, context, invocation, entrypoint, mode =
  ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6]

if redis.call('EXISTS', task) == 1 then
  return {0, 'DUPLICATE'}
end

local now = now_ms()
if redis.call('SCARD', live) >= tonumber(ARGV[9]) then
  local due = redis.call('ZCOUNT', admissions, '-inf', now)
    + redis.call('ZCOUNT', leases, '-inf', now)
  return {0, 'CAPACITY', due}
end

redis.call('HSET', task,
  'status', 'running', 'owner', owner, 'created', now, 'updated', now,
  'invocation', invocation, 'entrypoint', entrypoint, 'epoch', 0, 'attempt', 0,
  'max_attempts', ARGV[8], 'seq', 0)
if context ~= '' then
  redis.call('HSET', task, 'context', context)
end
redis.call('SADD', live, id)
redis.call('ZADD', owner_index, now, id)
redis.call('PERSIST', owner_index)
redis.call('INCR', owner_live)

if mode == 'reserved' then
  local expires = now + tonumber(ARGV[7])
  redis.call('HSET', task, 'phase', 'reserved', 'handed_off', '0', 'admission_expires', expires)
  redis.call('ZADD', admissions, expires, id)
else
  redis.call('HSET', task, 'phase', 'queued', 'handed_off', '1')
  redis.call('ZADD', queue, now, id)
  ring_doorbell(wake)
end

append_event(task, events, ARGV[11], 'statusUpdate', ARGV[10], ARGV[12])
return {1, now}
