-- register_worker: publishes or refreshes one worker's registry entry (the worker heartbeat).
-- The entry vanishes by itself `ttl` after its last refresh; the index records the same
-- deadline, is pruned of passed deadlines on every call, and expires with its latest deadline,
-- so nothing outlives the last worker.
--
-- KEYS[1] registry index (sorted set: worker id -> expiry ms)  KEYS[2] the worker's entry
-- ARGV[1] worker id  ARGV[2] entry JSON  ARGV[3] ttl ms (>= 1)
-- Returns the entry's expiry, ms since the epoch by the Redis clock.

-- @include "now_ms"

local index, entry = KEYS[1], KEYS[2]
local id, json, ttl = ARGV[1], ARGV[2], tonumber(ARGV[3])
local now = now_ms()
local expires = now + ttl
redis.call('SET', entry, json, 'PX', ttl)
redis.call('ZADD', index, expires, id)
redis.call('ZREMRANGEBYSCORE', index, '-inf', now)
local last = redis.call('ZRANGE', index, -1, -1, 'WITHSCORES')
redis.call('PEXPIREAT', index, last[2])
return expires
