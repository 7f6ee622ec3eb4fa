-- record_receipt: stores the receipt of the payment that admitted a task and, when the
-- admitting claim is still live and `prepared`, hands the task to its entrypoint's ready queue
-- in the same step: once paid for, it runs, and no crash can fall between the two. On a task
-- whose claim is gone the receipt is attached anyway: a settled payment's receipt is never
-- dropped.
--
-- KEYS[1] task  KEYS[2] leases  KEYS[3] queue  KEYS[4] wake
-- ARGV[1] task id  ARGV[2] holder id  ARGV[3] epoch  ARGV[4] receipt
-- Returns 2 committed (queued) | 1 attached only | 0 no such task

-- @include "now_ms"
-- @include "lease_is_live"
-- @include "enqueue"

local task, leases, queue, wake = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
if redis.call('EXISTS', task) == 0 then return 0 end
redis.call('HSET', task, 'rc', ARGV[4])
local now = now_ms()
if lease_is_live(task, ARGV[2], ARGV[3], now)
    and redis.call('HGET', task, 'ph') == 'prepared' then
  enqueue(task, queue, wake, leases, ARGV[1], now)
  return 2
end
return 1
