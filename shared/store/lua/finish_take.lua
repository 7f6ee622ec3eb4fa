-- finish_take: a worker's fenced terminal writes (compare-and-set items, as in cas.lua), then
-- claims and activates the next queued tasks for the same worker (take_queued), in one call:
-- a busy worker makes about one round trip per task (BullMQ's moveToFinished "fetch next").
-- Concurrent finishes of one worker process are sent together. The candidates are ids the
-- worker kept from its previous take or finish (their heads of queue); each is re-checked, so
-- a stale one is skipped, and fresh heads come back for the next call. A rejected write still
-- takes: the worker's slot is free either way.
--
-- KEYS[1] leases  KEYS[2] admissions  KEYS[3] live  KEYS[4 .. 3+Q] queues
-- KEYS[4+Q ..] per finish item, 5 keys (as cas.lua), then one task key per candidate
-- ARGV[1] retention ms  ARGV[2] event log length  ARGV[3] worker channel prefix
-- ARGV[4] claimer id  ARGV[5] lease ttl ms  ARGV[6] run limit ms  ARGV[7] max claims
-- ARGV[8] Q  ARGV[9] heads wanted per queue  ARGV[10] number of finish items F
-- ARGV[11 ..] per finish item, 11 values (as cas.lua); then per candidate: queue index, id
-- Returns {finishes, claims, heads}: per item a cas.lua reply; claims flat, 11 values per
-- claim (take_queued, activated); heads per queue (queue_heads).

-- @include "now_ms"
-- @include "swap_task"
-- @include "swap_item"
-- @include "take_queued"
-- @include "queue_heads"

local leases, admissions, live = KEYS[1], KEYS[2], KEYS[3]
local retention, log_len, worker_prefix = tonumber(ARGV[1]), ARGV[2], ARGV[3]
local claimer, ttl, run_ms, max = ARGV[4], tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local q, heads_wanted, items = tonumber(ARGV[8]), tonumber(ARGV[9]), tonumber(ARGV[10])
local now = now_ms()

local finishes = {}
for i = 0, items - 1 do
  local k, a = swap_item(KEYS, ARGV, 4 + q + i * 5, 11 + i * 11, leases, admissions, live)
  finishes[#finishes + 1] = swap_task(k, a, now, retention, log_len, worker_prefix)
end

local queues, tasks, picks = {}, {}, {}
for i = 1, q do queues[i] = KEYS[3 + i] end
local kc, ac = 3 + q + items * 5, 10 + items * 11
for i = 1, (#ARGV - ac) / 2 do
  tasks[i] = KEYS[kc + i]
  picks[i] = {tonumber(ARGV[ac + 2 * i - 1]), ARGV[ac + 2 * i]}
end
local claims = take_queued(leases, queues, tasks, picks, claimer, ttl, max, run_ms, now)
return {finishes, claims, queue_heads(queues, heads_wanted)}
