-- @include "ring_doorbell"
-- @include "num_str"
-- enqueue(task_key, queue_key, wake_key, leases_key, id, now): puts a running task in its
-- entrypoint's ready queue (FIFO by enqueue time) with no lease (and no settlement hold: it
-- runs).
local function enqueue(task_key, queue_key, wake_key, leases_key, id, now)
  redis.call('HSET', task_key, 'ph', 'queued', 'ho', '1')
  redis.call('HDEL', task_key, 'lo', 'ls', 'sh')
  redis.call('ZREM', leases_key, id)
  redis.call('ZADD', queue_key, num_str(now), id)
  ring_doorbell(wake_key)
end
