-- nonce_take: spends a nonce this cluster issued (nonce_issue), once: the first request that
-- presents it gets 1, every later one (at any gateway) 0, and so does a nonce never issued
-- here, expired, or dropped by the cap.
--
-- KEYS[1] the set of issued nonces  ARGV[1] nonce
-- Returns 1 when spent now, else 0.

-- @include "now_ms"

local set, nonce = KEYS[1], ARGV[1]

local expires = redis.call('ZSCORE', set, nonce)
if not expires then
  return 0
end
redis.call('ZREM', set, nonce)
if tonumber(expires) <= now_ms() then
  return 0
end
return 1
