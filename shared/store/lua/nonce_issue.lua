-- nonce_issue: records a nonce this cluster hands out (a Sign-In-With-X offer's), so that a
-- sign-in is accepted only with a nonce that was issued here. Unauthenticated callers make us
-- issue them, so the set is bounded in the same step: expired nonces are dropped, then the
-- oldest ones past the cap.
--
-- KEYS[1] the set of issued nonces (member: nonce, score: expiry in ms on the server clock)
-- ARGV[1] nonce  ARGV[2] validity in ms  ARGV[3] the most nonces kept
-- Returns the number of nonces outstanding.

-- @include "now_ms"

local set = KEYS[1]
local nonce, ttl, cap = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])

local now = now_ms()
redis.call('ZREMRANGEBYSCORE', set, '-inf', now)
redis.call('ZADD', set, now + ttl, nonce)
local count = redis.call('ZCARD', set)
if count > cap then
  -- Every offer has the same validity: the lowest expiries are the oldest offers.
  redis.call('ZREMRANGEBYRANK', set, 0, count - cap - 1)
  count = cap
end
-- The set lives as long as its last nonce, not longer.
local last = redis.call('ZRANGE', set, -1, -1, 'WITHSCORES')
if last[2] then
  redis.call('PEXPIREAT', set, last[2])
end
return count
