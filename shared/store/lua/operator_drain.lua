-- operator_drain: records an operator's request that one live worker drain (stop taking tasks,
-- finish its runs, deregister, exit). Only a worker listed with a deadline not yet passed and an
-- entry still present is live: nothing is written for any other id, so the hash holds live
-- workers' requests only. An earlier request of the worker stands (HSETNX). The hash expires
-- with the index's latest deadline; a field goes with its worker (deregister_worker.lua, or
-- register_worker.lua pruning it).
--
-- KEYS[1] registry index (sorted set: worker id -> expiry ms)  KEYS[2] the worker's entry
-- KEYS[3] drain requests (hash: worker id -> drain JSON)
-- ARGV[1] worker id  ARGV[2] the drain request as JSON
-- Returns the standing request's JSON, or false (nil) when the worker is not live.

-- @include "now_ms"

local index, entry, drains = KEYS[1], KEYS[2], KEYS[3]
local id, json = ARGV[1], ARGV[2]
local deadline = redis.call('ZSCORE', index, id)
if (not deadline) or tonumber(deadline) <= now_ms() or redis.call('EXISTS', entry) == 0 then
  return false
end
redis.call('HSETNX', drains, id, json)
local last = redis.call('ZRANGE', index, -1, -1, 'WITHSCORES')
redis.call('PEXPIREAT', drains, last[2])
return redis.call('HGET', drains, id)
