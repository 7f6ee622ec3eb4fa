-- resume: the owner answers a waiting task: waiting -> queued, with the invocation the caller
-- built from the record it read (new input and metadata) and that record's turn appended to
-- 'tu', the task's earlier turns (kept as the JSON text of an array, appended as written:
-- user JSON never passes through Lua's number-losing cjson). The caller read the record at
-- sequence number ARGV[3]; any event since (another resume, a cancel) makes this one STALE
-- and the caller reads again. Attempts (and retries, and the last retried failure) count
-- afresh, so each turn gets the full number of runs. Logs and publishes 'statusUpdate running' (a logged entry: only seq 1's is rebuilt).
--
-- KEYS[1] task  KEYS[2] events  KEYS[3] queue  KEYS[4] wake  KEYS[5] leases  KEYS[6] admissions
-- KEYS[7 .. 11] the task's push keys (push_outbox.lua)
-- ARGV[1] task id  ARGV[2] owner hash  ARGV[3] expected seq  ARGV[4] invocation json
-- ARGV[5] turn json  ARGV[6] channel  ARGV[7] event log length
-- Returns {1, updated, seq} | {0, 'NOT_FOUND'} | {0, 'STALE'}
--       | {0, 'NOT_WAITING', status, context, created, updated, result, error}

-- @include "now_ms"
-- @include "num_str"
-- @include "enqueue"
-- @include "log_event"

local task, events, queue, wake, leases = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local admissions = KEYS[6]
local id = ARGV[1]
local f = redis.call('HMGET', task, 'st', 'ow', 'ph', 'sq', 'tu', 'cx', 'cr', 'up', 'rs', 'er',
  'nc')
if not f[1] or f[2] ~= ARGV[2] then return {0, 'NOT_FOUND'} end
if f[1] ~= 'running' or f[3] ~= 'waiting' then
  return {0, 'NOT_WAITING', f[1], f[6], f[7], f[8], f[9], f[10]}
end
if f[4] ~= ARGV[3] then return {0, 'STALE'} end
local turns = f[5]
if not turns then
  turns = '[' .. ARGV[5] .. ']'
else
  turns = string.sub(turns, 1, -2) .. ',' .. ARGV[5] .. ']'
end
local now = now_ms()
local seq = redis.call('HINCRBY', task, 'sq', 1)
redis.call('HSET', task, 'iv', ARGV[4], 'tu', turns, 'at', '0', 'up', num_str(now))
-- The answer came: the waiting deadline goes with the request.
redis.call('HDEL', task, 'iq', 'ax', 'ry', 'le')
redis.call('ZREM', admissions, id)
enqueue(task, queue, wake, leases, id, now)
log_event(events, ARGV[6], seq, 'statusUpdate',
  '{"taskId":' .. cjson.encode(id) .. ',"status":"running"}', ARGV[7], f[11],
  push_keys(KEYS, 7, id))
return {1, now, seq}
