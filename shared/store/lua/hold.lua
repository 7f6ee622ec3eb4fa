-- hold: a paid admission holds its `prepared` claim for the settlement it is about to ask
-- for, whose outcome may become unknown (a facilitator that does not answer, a gateway that
-- dies): the task is marked held ('sh') and leaves the lease deadline index, so no recovery
-- or reaping sweep cancels or requeues it when the claim expires, and no one else can claim
-- it. Only the settlement's outcome moves it on: a receipt queues it to run
-- (record_receipt.lua, attach_receipt.lua), a settlement that never happened cancels it
-- (cas.lua). The claim stays: renewals extend its deadline (without indexing it), and the
-- receipt write under it hands the task off as before. Fenced.
--
-- KEYS[1] task  KEYS[2] leases
-- ARGV[1] task id  ARGV[2] holder id  ARGV[3] epoch
-- Returns 1 held | 0 when fenced out or not prepared.

-- @include "now_ms"
-- @include "lease_is_live"

local task, leases = KEYS[1], KEYS[2]
local now = now_ms()
if not lease_is_live(task, ARGV[2], ARGV[3], now) then return 0 end
if redis.call('HGET', task, 'ph') ~= 'prepared' then return 0 end
redis.call('HSET', task, 'sh', '1')
redis.call('ZREM', leases, ARGV[1])
return 1
