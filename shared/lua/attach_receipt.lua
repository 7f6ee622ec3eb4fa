-- attach_receipt: stores a receipt recovered after its gateway lost the settle answer (the
-- settlement recovery sweep). A task still `prepared` under that gateway's dead claim is
-- marked handed off, so the recovery sweep queues it when the claim expires: it was paid for,
-- it runs. A task that already ended keeps its status; the receipt is attached to it.
--
-- KEYS[1] task
-- ARGV[1] receipt
-- Returns 2 committed to run | 1 attached only | 0 no such task

local task = KEYS[1]
if redis.call('EXISTS', task) == 0 then return 0 end
redis.call('HSET', task, 'rc', ARGV[1])
local f = redis.call('HMGET', task, 'st', 'ph')
if f[1] == 'running' and f[2] == 'prepared' then
  redis.call('HSET', task, 'ho', '1')
  return 2
end
return 1
