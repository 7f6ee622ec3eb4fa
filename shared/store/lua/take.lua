-- take: claims queued tasks for a worker, oldest first, up to a maximum, and with a run limit
-- activates them in the same step (take_active). The tasks are popped from the queues here
-- (take_queued): the worker names no candidates, so no two workers race for one queue head.
--
-- KEYS[1] leases, KEYS[2 ..] queues (one per entrypoint); the task keys are named from the
-- shard's hash tag (see take_queued)
-- ARGV[1] claimer id  ARGV[2] lease ttl ms  ARGV[3] max claims
-- ARGV[4] run limit ms ('' = leave the claims prepared)
-- Returns {claims, more}: claims flat, 9 values per claim (11 when activated; see
-- take_queued); more: 1 when a queue still holds a task after the take, else 0.

-- @include "now_ms"
-- @include "take_queued"

local leases = KEYS[1]
local queues = {}
for i = 2, #KEYS do queues[#queues + 1] = KEYS[i] end
local out, more = take_queued(leases, queues, ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]),
  tonumber(ARGV[4]), now_ms())
return {out, more}
