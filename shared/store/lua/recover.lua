-- recover: settles tasks whose deadline passed; every worker runs it, so each case is re-checked
-- here against the Redis clock and a task another sweep already settled is left alone.
--   expired reservation, or expired claim taken before hand-off  -> cancelled (upstream reaping)
--   expired claim after hand-off (nothing ran yet)               -> back to the ready queue
--   expired active lease, run deadline passed                    -> failed, task_timeout
--   expired active lease, attempts used up                       -> failed, task_attempts_exhausted
--     (abandoned runs only: 'at' less the retries a handler asked for, 'ry', against 'ma')
--   expired active lease otherwise                               -> back to the queue
--   backoff whose due time passed (retry_later.lua)              -> back to the ready queue
--   held for a settlement (hold.lua)                             -> left alone: only the
--     settlement's outcome moves it (a receipt queues it, "never settled" cancels it)
-- Mode 'reap' only cancels (upstream reapExpiredAdmissions) and queues due backoffs (so that a
-- due backoff never stays at the head of the admissions index); 'recover' does everything.
--
-- KEYS[1] leases  KEYS[2] admissions  KEYS[3] live  KEYS[4] terminal  KEYS[5] terminal sizes
-- KEYS[6] terminal bytes
-- KEYS[7 ..] per task, 12 keys: task, events, owner_index, owner_live, queue, wake, push
--   configs, push outbox, push cursors, push due, push dropped (the task's push keys:
--   push_outbox.lua), the entrypoint's failed index (index_failed.lua: a task failed here
--   enters it)
-- ARGV[1] mode  ARGV[2] retention ms  ARGV[3] task channel prefix
-- ARGV[4 ..] task ids, in the order of their keys
-- Returns {requeued ids, failed ids, cancelled ids, retried ids (backoffs queued again)}

-- @include "now_ms"
-- @include "num_str"
-- @include "publish_event"
-- @include "finish_task"
-- @include "enqueue"
-- @include "index_failed"
-- @include "lease_field"

local leases, admissions, live = KEYS[1], KEYS[2], KEYS[3]
local terminal, terminal_sizes, terminal_bytes = KEYS[4], KEYS[5], KEYS[6]
local mode, retention, prefix = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local now = now_ms()
local requeued, failed, cancelled, retried = {}, {}, {}, {}

for i = 4, #ARGV do
  local id = ARGV[i]
  local base = 7 + (i - 4) * (7 + PUSH_KEYS)
  local k = {
    task = KEYS[base], events = KEYS[base + 1], owner_index = KEYS[base + 2],
    owner_live = KEYS[base + 3], queue = KEYS[base + 4], leases = leases,
    admissions = admissions, live = live, terminal = terminal, terminal_sizes = terminal_sizes,
    terminal_bytes = terminal_bytes, push = push_keys(KEYS, base + 6, id),
  }
  local wake, failed_index = KEYS[base + 5], KEYS[base + 6 + PUSH_KEYS]
  local f = redis.call('HMGET', k.task, 'st', 'ph', 'ls', 'ax',
    'ho', 'at', 'ma', 'ow', 'sq', 'sh', 'nc', 'ry')
  local status, phase = f[1], f[2]
  local lease_expires, run_deadline, run_ms = lease_unpack(f[3])
  local lease_due = lease_expires and lease_expires <= now
  local admission_due = f[4] and tonumber(f[4]) <= now
  local channel = prefix .. (f[8] or '') .. ':' .. id

  -- One HSET per transition: status, updated, seq (and the error of a failure); finish_task
  -- drops the phase (a terminal record has none).
  local function settle(next_status, event, data, err)
    local seq = tonumber(f[9] or '0') + 1
    if err then
      redis.call('HSET', k.task, 'st', next_status, 'up', num_str(now),
        'sq', num_str(seq), 'er', err)
    else
      redis.call('HSET', k.task, 'st', next_status, 'up', num_str(now),
        'sq', num_str(seq))
    end
    local has_push = finish_task(k, id, phase, retention, now)
    if next_status == 'failed' then index_failed(failed_index, id, now, retention) end
    -- The terminal record rebuilds this event (redis/event_log.rs): published, not logged.
    publish_event(channel, seq, event, data, f[11], k.push, has_push)
  end

  if status ~= 'running' then
    -- Stale index entries of a finished or expired task.
    redis.call('ZREM', leases, id)
    redis.call('ZREM', admissions, id)
  elseif f[10] == '1' then
    -- Held for a settlement whose outcome is not known yet: it may have been paid for, so it
    -- is neither cancelled nor requeued. hold.lua took it out of the lease index; an entry
    -- found here anyway is stale and dropped, so it cannot stay at the head of the due index.
    redis.call('ZREM', leases, id)
  elseif phase == 'waiting' and admission_due then
    -- Nobody answered the task's request in time.
    local err = cjson.encode({code = 'input_timeout',
      message = "No input arrived before the task's waiting deadline"})
    settle('failed', 'error',
      '{"taskId":' .. cjson.encode(id) .. ',"status":"failed","error":' .. err .. '}', err)
    failed[#failed + 1] = id
  elseif phase == 'backoff' and admission_due then
    -- A retry's backoff ended: the due time goes, the task runs again.
    redis.call('HDEL', k.task, 'ax')
    redis.call('ZREM', admissions, id)
    enqueue(k.task, k.queue, wake, leases, id, now)
    retried[#retried + 1] = id
  elseif (phase == 'reserved' and admission_due)
      or (phase == 'prepared' and lease_due and f[5] ~= '1') then
    settle('cancelled', 'statusUpdate',
      '{"taskId":' .. cjson.encode(id) .. ',"status":"cancelled"}')
    cancelled[#cancelled + 1] = id
  elseif mode == 'recover' and phase == 'prepared' and lease_due then
    enqueue(k.task, k.queue, wake, leases, id, now)
    requeued[#requeued + 1] = id
  elseif mode == 'recover' and phase == 'active' and lease_due then
    local err = nil
    if run_deadline and run_deadline ~= '' and tonumber(run_deadline) <= now then
      err = cjson.encode({code = 'task_timeout',
        message = 'Task exceeded its ' .. (run_ms ~= '' and run_ms or '0') .. 'ms execution limit'})
    elseif tonumber(f[6] or '0') - tonumber(f[12] or '0') >= tonumber(f[7] or '1') then
      err = cjson.encode({code = 'task_attempts_exhausted',
        message = 'Task was abandoned by its worker ' .. (f[6] or '0') .. ' times'})
    end
    if err then
      settle('failed', 'error',
        '{"taskId":' .. cjson.encode(id) .. ',"status":"failed","error":' .. err .. '}', err)
      failed[#failed + 1] = id
    else
      enqueue(k.task, k.queue, wake, leases, id, now)
      requeued[#requeued + 1] = id
    end
  end
end
return {requeued, failed, cancelled, retried}
