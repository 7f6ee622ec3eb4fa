-- @include "ring_doorbell"
-- @include "num_str"
-- @include "lease_field"
-- enqueue(task_key, queue_key, wake_key, leases_key, id, now): puts a running task in its
-- entrypoint's ready queue (FIFO by enqueue time) with no lease (and no settlement hold: it
-- runs).
local function enqueue(task_key, queue_key, wake_key, leases_key, id, now)
  local _, _, _, epoch = lease_unpack(redis.call('HGET', task_key, 'ls'))
  redis.call('HSET', task_key, 'ph', 'queued', 'ho', '1', 'ls', lease_dropped(epoch or '0'))
  redis.call('HDEL', task_key, 'lo', 'sh')
  redis.call('ZREM', leases_key, id)
  redis.call('ZADD', queue_key, num_str(now), id)
  ring_doorbell(wake_key)
end
