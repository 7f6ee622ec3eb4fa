-- record_receipt: stores the receipt of the payment that admitted a task and, when the
-- admitting claim is still live and `prepared`, hands the task to its entrypoint's ready queue
-- in the same step: once paid for, it runs, and no crash can fall between the two. A claim
-- held for the settlement (hold.lua) commits the task even past its deadline: nobody else can
-- claim a held task, so the claim is still the admission's own; the hand-off ends the hold.
-- A running task already handed off was committed by this payment before (the settlement
-- recovery's receipt, or an earlier try of this write whose reply was lost): committed, left
-- as it is. On a task whose claim is otherwise gone the receipt is attached anyway: a settled
-- payment's receipt is never dropped.
--
-- KEYS[1] task  KEYS[2] leases  KEYS[3] queue  KEYS[4] wake
-- ARGV[1] task id  ARGV[2] holder id  ARGV[3] epoch  ARGV[4] receipt
-- Returns 2 committed (queued) | 1 attached only | 0 no such task

-- @include "now_ms"
-- @include "enqueue"
-- @include "lease_field"

local task, leases, queue, wake = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
if redis.call('EXISTS', task) == 0 then return 0 end
redis.call('HSET', task, 'rc', ARGV[4])
local now = now_ms()
local f = redis.call('HMGET', task, 'st', 'ph', 'lo', 'ls', 'sh', 'ho')
local lease_expires, _, _, held_epoch = lease_unpack(f[4])
local current = f[1] == 'running' and f[2] == 'prepared' and f[3] == ARGV[2]
  and held_epoch == ARGV[3]
if current and (f[5] == '1' or (lease_expires and lease_expires > now)) then
  enqueue(task, queue, wake, leases, ARGV[1], now)
  return 2
end
if f[1] == 'running' and f[6] == '1' then return 2 end
return 1
