-- cas: compare-and-set of a task's status, optionally fenced by a lease. A terminal next status
-- runs finish_task (lease released, live count decremented once, retention set). An unfenced
-- terminal write (cancel) of a task that a worker holds notifies that worker's channel so its
-- handler aborts at once.
--
-- KEYS[1] task  KEYS[2] events  KEYS[3] leases  KEYS[4] admissions  KEYS[5] live
-- KEYS[6] owner_index  KEYS[7] owner_live  KEYS[8] queue
-- ARGV[1] task id  ARGV[2] owner hash  ARGV[3] expected statuses, comma-wrapped (",running,")
-- ARGV[4] next status  ARGV[5] result json ('' none)  ARGV[6] error json ('' none)
-- ARGV[7] fence holder ('' unfenced)  ARGV[8] fence epoch  ARGV[9] retention ms
-- ARGV[10] event name  ARGV[11] event data json  ARGV[12] channel  ARGV[13] event log length
-- ARGV[14] worker channel prefix
-- Returns {1, 'OK', status, context, created, updated, result, error}
--       | {0, 'NOT_FOUND' | 'STATUS' | 'FENCED', status, context, created, updated, result, error}

-- @include "now_ms"
-- @include "lease_is_live"
-- @include "append_event"
-- @include "finish_task"

local k = {
  task = KEYS[1], events = KEYS[2], leases = KEYS[3], admissions = KEYS[4], live = KEYS[5],
  owner_index = KEYS[6], owner_live = KEYS[7], queue = KEYS[8],
}
local id, next_status = ARGV[1], ARGV[4]

local function view(ok, reason)
  local f = redis.call('HMGET', k.task, 'status', 'context', 'created', 'updated', 'result', 'error')
  return {ok, reason, f[1], f[2], f[3], f[4], f[5], f[6]}
end

local f = redis.call('HMGET', k.task, 'status', 'owner', 'lease_owner')
if not f[1] or f[2] ~= ARGV[2] then return {0, 'NOT_FOUND'} end
if not string.find(ARGV[3], ',' .. f[1] .. ',', 1, true) then return view(0, 'STATUS') end
-- A terminal task never runs again, whatever the caller expected.
if f[1] ~= 'running' and next_status == 'running' then return view(0, 'STATUS') end
local now = now_ms()
if ARGV[7] ~= '' and not lease_is_live(k.task, ARGV[7], ARGV[8], now) then
  return view(0, 'FENCED')
end

redis.call('HSET', k.task, 'status', next_status, 'updated', now)
if ARGV[5] ~= '' then redis.call('HSET', k.task, 'result', ARGV[5]) end
if ARGV[6] ~= '' then redis.call('HSET', k.task, 'error', ARGV[6]) end
if next_status ~= 'running' then
  finish_task(k, id, now, tonumber(ARGV[9]))
  if ARGV[7] == '' and f[3] then
    redis.call('PUBLISH', ARGV[14] .. f[3], id)
  end
end
append_event(k.task, k.events, ARGV[12], ARGV[10], ARGV[11], ARGV[13])
return view(1, 'OK')
