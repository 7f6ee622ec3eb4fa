-- @include "lease_field"
-- lease_is_live(task_key, owner_id, epoch, now): true when (owner_id, epoch) is the task's current
-- lease, the lease has not expired and the task is still running. An expired lease is never
-- revived: renewing it fails, whoever asks.
local function lease_is_live(task_key, owner_id, epoch, now)
  local f = redis.call('HMGET', task_key, 'st', 'lo', 'ls')
  local expires, _, _, held_epoch = lease_unpack(f[3])
  return f[1] == 'running' and f[2] == owner_id and held_epoch == epoch
    and expires ~= nil and expires > now
end
