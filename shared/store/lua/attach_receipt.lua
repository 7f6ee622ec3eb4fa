-- attach_receipt: stores a receipt recovered after its gateway lost the settle answer (the
-- settlement recovery sweep). The task was paid for, so it runs: one the gateway held for the
-- settlement (hold.lua) is queued at once; one still `prepared` under the admitting claim
-- without a hold is marked handed off, so that the recovery sweep queues it when that claim
-- expires instead of cancelling it. A task that already ended keeps its status; the receipt
-- is attached to it.
--
-- KEYS[1] task  KEYS[2] leases  KEYS[3] queue  KEYS[4] wake
-- ARGV[1] task id  ARGV[2] receipt
-- Returns 2 committed to run | 1 attached only | 0 no such task

-- @include "now_ms"
-- @include "enqueue"

local task, leases, queue, wake = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
if redis.call('EXISTS', task) == 0 then return 0 end
redis.call('HSET', task, 'rc', ARGV[2])
local f = redis.call('HMGET', task, 'st', 'ph', 'sh')
if f[1] == 'running' and f[2] == 'prepared' then
  if f[3] == '1' then
    enqueue(task, queue, wake, leases, ARGV[1], now_ms())
  else
    redis.call('HSET', task, 'ho', '1')
  end
  return 2
end
return 1
