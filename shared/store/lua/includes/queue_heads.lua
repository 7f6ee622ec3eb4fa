-- queue_heads(queues, n): the first n ids of each queue, one list per queue. Returned with a
-- take so that the worker's next call (a finish that takes the next task) can name the task
-- keys of its candidates in KEYS without a read of its own.
local function queue_heads(queues, n)
  local heads = {}
  for i = 1, #queues do
    if n > 0 then
      heads[i] = redis.call('ZRANGE', queues[i], 0, n - 1)
    else
      heads[i] = {}
    end
  end
  return heads
end
