-- cas: compare-and-set of task statuses, each optionally fenced by a lease; many at once
-- (concurrent completions of one process are sent together). A terminal next status runs
-- finish_task (lease released, live count decremented once, retention set). A terminal task
-- never runs again. An unfenced terminal write (cancel) of a task that a worker holds notifies
-- that worker's channel so its handler aborts at once.
--
-- KEYS[1] leases  KEYS[2] admissions  KEYS[3] live
-- KEYS[4 ..] per task, 5 keys: task, events, owner_index, owner_live, queue
-- ARGV[1] retention ms  ARGV[2] event log length  ARGV[3] worker channel prefix
-- ARGV[4 ..] per task, 11 values: task id, owner hash, expected statuses comma-wrapped
--   (",running,"), next status, result json ('' none), error json ('' none), fence holder
--   ('' unfenced), fence epoch, event name, event data json, channel
-- Returns per task:
--   {1 | 0, 'OK' | 'NOT_FOUND' | 'STATUS' | 'FENCED', status, context, created, updated, result, error}

-- @include "now_ms"
-- @include "append_event"
-- @include "finish_task"

local leases, admissions, live = KEYS[1], KEYS[2], KEYS[3]
local retention, log_len, worker_prefix = tonumber(ARGV[1]), ARGV[2], ARGV[3]
local now = now_ms()
local out = {}

for i = 0, (#KEYS - 3) / 5 - 1 do
  local kb, ab = 4 + i * 5, 4 + i * 11
  local k = {
    task = KEYS[kb], events = KEYS[kb + 1], owner_index = KEYS[kb + 2],
    owner_live = KEYS[kb + 3], queue = KEYS[kb + 4], leases = leases, admissions = admissions,
    live = live,
  }
  local id, next_status, holder = ARGV[ab], ARGV[ab + 3], ARGV[ab + 6]
  local f = redis.call('HMGET', k.task, 'status', 'owner', 'lease_owner', 'epoch',
    'lease_expires', 'context', 'created', 'updated', 'result', 'error')
  local status = f[1]
  local reason = 'OK'
  if not status or f[2] ~= ARGV[ab + 1] then
    reason = 'NOT_FOUND'
  elseif not string.find(ARGV[ab + 2], ',' .. status .. ',', 1, true)
      or (status ~= 'running' and next_status == 'running') then
    reason = 'STATUS'
  elseif holder ~= '' and not (status == 'running' and f[3] == holder and f[4] == ARGV[ab + 7]
      and f[5] and tonumber(f[5]) > now) then
    reason = 'FENCED'
  end

  if reason == 'NOT_FOUND' then
    out[#out + 1] = {0, reason}
  elseif reason ~= 'OK' then
    out[#out + 1] = {0, reason, status, f[6], f[7], f[8], f[9], f[10]}
  else
    local result, err = f[9], f[10]
    redis.call('HSET', k.task, 'status', next_status, 'updated', now)
    if ARGV[ab + 4] ~= '' then
      result = ARGV[ab + 4]
      redis.call('HSET', k.task, 'result', result)
    end
    if ARGV[ab + 5] ~= '' then
      err = ARGV[ab + 5]
      redis.call('HSET', k.task, 'error', err)
    end
    if next_status ~= 'running' then
      finish_task(k, id, now, retention)
      if holder == '' and f[3] then
        redis.call('PUBLISH', worker_prefix .. f[3], id)
      end
    end
    append_event(k.task, k.events, ARGV[ab + 10], ARGV[ab + 8], ARGV[ab + 9], log_len)
    out[#out + 1] = {1, reason, next_status, f[6], f[7], now, result, err}
  end
end
return out
