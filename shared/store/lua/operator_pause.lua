-- operator_pause: pauses an entrypoint cluster-wide (ARGV[2] set) or lifts its pause (ARGV[2]
-- empty), and moves the registry version past every value it ever held, so that every gateway
-- lists again (with the paused set) on its next check. One script: a gateway that sees the
-- new version reads the new pauses.
--
-- KEYS[1] paused entrypoints (hash: key -> pause JSON)
-- KEYS[2] registry version (string)
-- ARGV[1] the entrypoint key
-- ARGV[2] the pause as JSON, or empty to resume
-- Returns 1 when the pause was set or an existing pause was lifted, else 0.
--
-- @include "bump_registry_version"

local paused, version = KEYS[1], KEYS[2]
local key, pause = ARGV[1], ARGV[2]
local done
if pause ~= '' then
  redis.call('HSET', paused, key, pause)
  done = 1
else
  done = redis.call('HDEL', paused, key)
end
-- SET drops the version's expiry; the next heartbeat sets it again (register_worker.lua), and
-- with no worker left the key simply stays.
bump_registry_version(version)
return done
