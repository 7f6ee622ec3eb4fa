-- push_claim: claims up to `limit` of a shard's tasks whose deliveries are due, for lease ms:
-- each is scored by its claim's expiry, so no other deliverer takes it meanwhile, and a
-- deliverer that dies leaves it due again once the claim expires.
--
-- KEYS[1] due (sorted set: task id by when its deliveries are due, ms, Redis clock)
-- ARGV[1] lease ms  ARGV[2] limit
-- Returns the claimed task ids.
-- @include "now_ms"

local due = KEYS[1]
local now = now_ms()
local ids = redis.call('ZRANGEBYSCORE', due, '-inf', now, 'LIMIT', 0, tonumber(ARGV[2]))
local until_ms = now + tonumber(ARGV[1])
for _, id in ipairs(ids) do
  redis.call('ZADD', due, 'XX', until_ms, id)
end
return ids
