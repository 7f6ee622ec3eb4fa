-- registry_version: what a gateway compares to know whether its cached registry listing is
-- still the registry's (read-only; one round trip, no listing).
--
-- The pair changes whenever the live set or an entry changes: the scripts bump the version on
-- every join, leave, content change and pruning; an entry that simply expires (a killed worker)
-- runs no script, but it moves into the count of passed deadlines, by the Redis clock, the same
-- clock that set them (no skew with the gateway's clock). Pruning it later bumps the version,
-- so a pair never comes back to a value with a different live set.
--
-- KEYS[1] registry index (sorted set: worker id -> expiry ms)  KEYS[2] registry version
-- Returns {version (digits; "0" when absent), members whose deadline passed}.

-- @include "now_ms"

local index, version = KEYS[1], KEYS[2]
local now = now_ms()
return { redis.call('GET', version) or '0', redis.call('ZCOUNT', index, '-inf', now) }
