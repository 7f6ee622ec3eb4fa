-- cas: compare-and-set of task statuses, each optionally fenced by a lease; many at once
-- (concurrent completions of one process are sent together). A terminal next status runs
-- finish_task (lease released, live count decremented once, retention set). A terminal task
-- never runs again. An unfenced terminal write (cancel) of a task that a worker holds notifies
-- that worker's channel so its handler aborts at once.
--
-- KEYS[1] leases  KEYS[2] admissions  KEYS[3] live  KEYS[4] terminal  KEYS[5] terminal sizes
-- KEYS[6] terminal bytes
-- KEYS[7 ..] per task, 11 keys: task, events, owner_index, owner_live, queue, push configs,
--   push outbox, push cursors, push due, push dropped (the task's push keys: push_outbox.lua),
--   the entrypoint's failed index (index_failed.lua: a task that fails enters it)
-- ARGV[1] retention ms  ARGV[2] event log length  ARGV[3] worker channel prefix
-- ARGV[4 ..] per task, 11 values: task id, owner hash, expected statuses comma-wrapped
--   (",running,"), next status, result json ('' none), error json ('' none), fence holder
--   ('' unfenced), fence epoch, event name, event data json, channel
-- Returns per task:
--   {1 | 0, 'OK' | 'NOT_FOUND' | 'STATUS' | 'FENCED', status, context, created, updated, result, error}
-- Emits the item's event (statusUpdate, resultUpdate or error) when applied.

-- @include "now_ms"
-- @include "swap_task"
-- @include "swap_item"

local shard = shard_keys(KEYS)
local retention, log_len, worker_prefix = tonumber(ARGV[1]), ARGV[2], ARGV[3]
local now = now_ms()
local out = {}
-- The terminal writes' shard-wide bookkeeping goes out once for all items (finish_task.lua).
local acc = finish_batch()
local items = (#KEYS - SHARD_KEYS) / ITEM_KEYS
acc.no_push = no_push_configs(KEYS, SHARD_KEYS + 1, items)

for i = 0, items - 1 do
  local k, a = swap_item(KEYS, ARGV, SHARD_KEYS + 1 + i * ITEM_KEYS, 4 + i * 11, shard)
  out[#out + 1] = swap_task(k, a, now, retention, log_len, worker_prefix, acc)
end
finish_flush(acc)
return out
