-- create: stores new tasks (status running), each queued or held reserved. Concurrent creates
-- of one process arrive here together (see redis/batch.rs), so one call admits a batch.
--
-- Capacity counts non-terminal tasks cluster-wide (SCARD live), checked per task in order. When
-- full, the reply carries how many admissions and leases are already due, so the caller reaps
-- them and retries: reaping always happens before capacity is enforced.
--
-- KEYS[1] live  KEYS[2] admissions  KEYS[3] leases
-- KEYS[4 ..] per task, 6 keys: task, events, owner_index, owner_live, queue, wake
-- ARGV[1] max tasks  ARGV[2] event log length
-- ARGV[3 ..] per task, 9 values: id, owner hash, context id ('' for none), invocation json,
--   entrypoint, 'queued' | 'reserved', admission ttl ms, max attempts, channel
-- Returns per task: {1, created_ms} | {0, 'DUPLICATE'} | {0, 'CAPACITY', due_count}
-- Emits statusUpdate running (seq 1) per created task.

-- @include "now_ms"
-- @include "log_event"
-- @include "ring_doorbell"

local live, admissions, leases = KEYS[1], KEYS[2], KEYS[3]
local max_tasks, log_len = tonumber(ARGV[1]), ARGV[2]
local now = now_ms()
local out = {}

for i = 0, (#KEYS - 3) / 6 - 1 do
  local kb, ab = 4 + i * 6, 3 + i * 9
  local task, events, owner_index = KEYS[kb], KEYS[kb + 1], KEYS[kb + 2]
  local owner_live, queue, wake = KEYS[kb + 3], KEYS[kb + 4], KEYS[kb + 5]
  local id, owner, context, invocation = ARGV[ab], ARGV[ab + 1], ARGV[ab + 2], ARGV[ab + 3]
  local entrypoint, mode, channel = ARGV[ab + 4], ARGV[ab + 5], ARGV[ab + 8]

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
    local set = {'status', 'running', 'phase', phase, 'handed_off', handed_off, 'owner', owner,
      'created', now, 'updated', now, 'invocation', invocation, 'entrypoint', entrypoint,
      'epoch', 0, 'attempt', 0, 'max_attempts', ARGV[ab + 7], 'seq', 1}
    if context ~= '' then
      set[#set + 1] = 'context'
      set[#set + 1] = context
    end
    local expires = nil
    if mode == 'reserved' then
      expires = now + tonumber(ARGV[ab + 6])
      set[#set + 1] = 'admission_expires'
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
    log_event(events, channel, 1, 'statusUpdate',
      '{"taskId":' .. cjson.encode(id) .. ',"status":"running"}', log_len)
    out[#out + 1] = {1, now}
  end
end
return out
