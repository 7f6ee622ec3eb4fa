-- finish_take: a worker's fenced terminal writes (compare-and-set items, as in cas.lua), then
-- claims and activates the next queued tasks for the same worker (take_queued), in one call:
-- a busy worker makes about one round trip per task (BullMQ's moveToFinished "fetch next").
-- Concurrent finishes of one worker process are sent together. The next tasks are popped from
-- the queues here, so no worker names candidates and none races another for a queue head. A
-- rejected write still takes: the worker's slot is free either way.
--
-- KEYS[1 .. 6] as cas.lua's (leases, admissions, live, terminal, terminal sizes, terminal bytes)
-- KEYS[7 .. 6+Q] queues  KEYS[7+Q ..] per finish item, 11 keys (as cas.lua)
-- ARGV[1] retention ms  ARGV[2] event log length  ARGV[3] worker channel prefix
-- ARGV[4] claimer id  ARGV[5] lease ttl ms  ARGV[6] run limit ms  ARGV[7] max claims
-- ARGV[8] Q  ARGV[9] number of finish items F
-- ARGV[10 ..] per finish item, 11 values (as cas.lua)
-- Returns {finishes, claims, more}: per item a cas.lua reply; claims flat, 11 values per
-- claim (take_queued, activated); more: 1 when a queue still holds a task after the take.

-- @include "now_ms"
-- @include "swap_task"
-- @include "swap_item"
-- @include "take_queued"

local shard = shard_keys(KEYS)
local retention, log_len, worker_prefix = tonumber(ARGV[1]), ARGV[2], ARGV[3]
local claimer, ttl, run_ms, max = ARGV[4], tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local q, items = tonumber(ARGV[8]), tonumber(ARGV[9])
local now = now_ms()

local finishes = {}
-- The terminal writes' shard-wide bookkeeping goes out once for all items (finish_task.lua).
local acc = finish_batch()
acc.no_push = no_push_configs(KEYS, SHARD_KEYS + 1 + q, items)
for i = 0, items - 1 do
  local k, a = swap_item(KEYS, ARGV, SHARD_KEYS + 1 + q + i * ITEM_KEYS, 10 + i * 11, shard)
  finishes[#finishes + 1] = swap_task(k, a, now, retention, log_len, worker_prefix, acc)
end
finish_flush(acc)

local queues = {}
for i = 1, q do queues[i] = KEYS[SHARD_KEYS + i] end
local claims, more = take_queued(shard.leases, queues, claimer, ttl, max, run_ms, now)
return {finishes, claims, more}
