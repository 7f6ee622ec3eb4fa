-- take: claims queued tasks for a worker, oldest first, up to a maximum, and with a run limit
-- activates them in the same step (take_active). The caller peeked the candidate ids from the
-- head of the queues (or kept them from its last call's reply) and declares their task keys;
-- each is re-checked here (see take_queued).
--
-- KEYS[1] leases, KEYS[2 .. 1+Q] queues, KEYS[2+Q ..] candidate task keys
-- ARGV[1] claimer id  ARGV[2] lease ttl ms  ARGV[3] max claims  ARGV[4] Q
-- ARGV[5] run limit ms ('' = leave the claims prepared)  ARGV[6] heads wanted per queue
-- ARGV[7 ..] per candidate: queue index (1-based), task id
-- Returns {claims, heads}: claims flat, 9 values per claim (11 when activated; see
-- take_queued); heads: per queue, its first ids after the take (queue_heads).

-- @include "now_ms"
-- @include "take_queued"
-- @include "queue_heads"

local leases = KEYS[1]
local claimer, ttl, max, q = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local run_ms = tonumber(ARGV[5])
local queues, tasks, picks = {}, {}, {}
for i = 1, q do queues[i] = KEYS[1 + i] end
for i = 1, (#ARGV - 6) / 2 do
  tasks[i] = KEYS[1 + q + i]
  picks[i] = {tonumber(ARGV[5 + 2 * i]), ARGV[6 + 2 * i]}
end
local out = take_queued(leases, queues, tasks, picks, claimer, ttl, max, run_ms, now_ms())
return {out, queue_heads(queues, tonumber(ARGV[6]))}
