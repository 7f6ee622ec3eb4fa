-- create: stores new tasks (status running), each queued or held reserved. Concurrent creates
-- of one process arrive here together (see redis/batch.rs), so one call admits a batch.
--
-- Capacity counts non-terminal tasks cluster-wide (SCARD live), checked per task in order. When
-- full, the reply carries how many admissions and leases are already due, so the caller reaps
-- them and retries: reaping always happens before capacity is enforced.
--
-- KEYS[1] live  KEYS[2] admissions  KEYS[3] leases
-- KEYS[4 ..] per task, 5 keys: task, owner_index, owner_live, queue, wake
-- ARGV[1] max tasks
-- ARGV[2 ..] per task, 8 values: id, owner hash, context id ('' for none), invocation json,
--   entrypoint, 'queued' | 'reserved', admission ttl ms, max attempts
-- Returns per task: {1, created_ms} | {0, 'DUPLICATE'} | {0, 'CAPACITY', due_count}
-- Each created task's seq is 1: its `statusUpdate running`, which is neither logged nor
-- published. The record rebuilds it (redis/event_log.rs), and nobody can listen to a task
-- before its creation except the creator, whose create reply is that event.

-- @include "now_ms"
-- @include "ring_doorbell"

local live, admissions, leases = KEYS[1], KEYS[2], KEYS[3]
local max_tasks = tonumber(ARGV[1])
local now = now_ms()
local out = {}

for i = 0, (#KEYS - 3) / 5 - 1 do
  local kb, ab = 4 + i * 5, 2 + i * 8
  local task, owner_index = KEYS[kb], KEYS[kb + 1]
  local owner_live, queue, wake = KEYS[kb + 2], KEYS[kb + 3], KEYS[kb + 4]
  local id, owner, context, invocation = ARGV[ab], ARGV[ab + 1], ARGV[ab + 2], ARGV[ab + 3]
  local entrypoint, mode = ARGV[ab + 4], ARGV[ab + 5]

  if redis.call('EXISTS', task) == 1 then
    out[#out + 1] = {0, 'DUPLICATE'}
  elseif redis.call('SCARD', live) >= max_tasks then
    local due = redis.call('ZCOUNT', admissions, '-inf', now)
      + redis.call('ZCOUNT', leases, '-inf', now)
    out[#out + 1] = {0, 'CAPACITY', due}
  else
    local phase, handed_off = 'queued', '1'
    if mode == 'reserved' then phase, handed_off = 'reserved', '0' end
    -- One HSET: the record, its optional fields and seq 1 (the event below).
    local set = {'st', 'running', 'ph', phase, 'ho', handed_off, 'ow', owner,
      'cr', now, 'up', now, 'iv', invocation, 'en', entrypoint,
      'ec', 0, 'at', 0, 'ma', ARGV[ab + 7], 'sq', 1}
    if context ~= '' then
      set[#set + 1] = 'cx'
      set[#set + 1] = context
    end
    local expires = nil
    if mode == 'reserved' then
      expires = now + tonumber(ARGV[ab + 6])
      set[#set + 1] = 'ax'
      set[#set + 1] = expires
    end
    redis.call('HSET', task, unpack(set))
    redis.call('SADD', live, id)
    redis.call('ZADD', owner_index, now, id)
    if redis.call('INCR', owner_live) == 1 then
      -- The owner's first live task: its index must outlive every task from now on.
      redis.call('PERSIST', owner_index)
    end
    if expires then
      redis.call('ZADD', admissions, expires, id)
    else
      redis.call('ZADD', queue, now, id)
      ring_doorbell(wake)
    end
    out[#out + 1] = {1, now}
  end
end
return out
