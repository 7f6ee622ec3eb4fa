-- record_receipt: stores the receipt of the payment that admitted a task. With the admitting
-- claim still live and `prepared`, the task is also marked handed off, so that from here on an
-- expired claim sends it to the ready queue (it was paid for: it must run) instead of being
-- reaped to `cancelled`. On a task whose claim is gone the receipt is attached anyway: a
-- settled payment's receipt is never dropped.
--
-- KEYS[1] task
-- ARGV[1] holder id  ARGV[2] epoch  ARGV[3] receipt
-- Returns 2 committed | 1 attached only | 0 no such task

-- @include "now_ms"
-- @include "lease_is_live"

local task = KEYS[1]
if redis.call('EXISTS', task) == 0 then return 0 end
redis.call('HSET', task, 'receipt', ARGV[3])
if lease_is_live(task, ARGV[1], ARGV[2], now_ms())
    and redis.call('HGET', task, 'phase') == 'prepared' then
  redis.call('HSET', task, 'handed_off', '1')
  return 2
end
return 1
