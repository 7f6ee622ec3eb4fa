-- deregister_worker: removes one worker's registry entry at once (clean shutdown), bumps the
-- registry version when the worker was listed, and moves the expiry of the index and of the
-- version to the latest deadline left in the index (both go when it is empty). The worker's drain
-- request, if an operator asked for one (operator_drain.lua), goes with it; the drain hash follows
-- the index's expiry too.
--
-- KEYS[1] registry index (sorted set: worker id -> expiry ms)  KEYS[2] the worker's entry
-- KEYS[3] registry version (string)  KEYS[4] drain requests (hash: worker id -> drain JSON)
-- ARGV[1] worker id
-- Returns 1 when the worker was registered, else 0.

-- @include "bump_registry_version"

local index, entry, version, drains = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local removed = redis.call('ZREM', index, ARGV[1])
redis.call('DEL', entry)
redis.call('HDEL', drains, ARGV[1])
if removed == 1 then
  bump_registry_version(version)
end
local last = redis.call('ZRANGE', index, -1, -1, 'WITHSCORES')
if last[2] then
  redis.call('PEXPIREAT', index, last[2])
  redis.call('PEXPIREAT', version, last[2])
  redis.call('PEXPIREAT', drains, last[2])
else
  -- Nothing listed: an absent version reads as 0, which only ever means "no worker".
  redis.call('DEL', version)
  redis.call('DEL', drains)
end
return removed
