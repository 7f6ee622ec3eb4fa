-- hand_off: a prepared claim taken before hand-off (paid admission) puts its task in the
-- entrypoint's ready queue once admission is settled. Fenced.
--
-- KEYS[1] task  KEYS[2] leases  KEYS[3] queue  KEYS[4] wake
-- ARGV[1] task id  ARGV[2] holder id  ARGV[3] epoch
-- Returns 1 | 0 when fenced out.

-- @include "now_ms"
-- @include "lease_is_live"
-- @include "enqueue"

local task, leases, queue, wake = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local now = now_ms()
if not lease_is_live(task, ARGV[2], ARGV[3], now) then return 0 end
if redis.call('HGET', task, 'ph') ~= 'prepared' then return 0 end
enqueue(task, queue, wake, leases, ARGV[1], now)
return 1
