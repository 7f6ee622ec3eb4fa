-- register_worker: publishes or refreshes one worker's registry entry (the worker heartbeat).
-- The entry vanishes by itself `ttl` after its last refresh; the index records the same
-- deadline, is pruned of passed deadlines on every call, and expires with its latest deadline,
-- so nothing outlives the last worker.
--
-- The registry version (see registry_version.lua) is bumped when the set of live workers or an
-- entry's content changes: a worker that was not live (absent, or past its deadline), a changed
-- entry, or pruned index members. A plain refresh of an unchanged live entry leaves it alone, so
-- gateways keep their cached card. The version key expires with the index.
--
-- Pruned workers' drain requests (operator_drain.lua) are dropped with them, and so is the request
-- of a worker id registered afresh (a new process: no live entry, or another `startedAtMs`); the
-- drain hash expires with the index too: no request outlives the process it was for.
--
-- KEYS[1] registry index (sorted set: worker id -> expiry ms)  KEYS[2] the worker's entry
-- KEYS[3] registry version (string)  KEYS[4] drain requests (hash: worker id -> drain JSON)
-- ARGV[1] worker id  ARGV[2] entry JSON  ARGV[3] ttl ms (>= 1)
-- Returns {the entry's expiry, ms since the epoch by the Redis clock; the drain request standing
-- for this worker (JSON) or nil}: the worker learns of a drain from its own heartbeat, with no
-- read of its own.

-- @include "now_ms"
-- @include "bump_registry_version"

local index, entry, version, drains = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local id, json, ttl = ARGV[1], ARGV[2], tonumber(ARGV[3])
local now = now_ms()
local expires = now + ttl
local before = redis.call('ZSCORE', index, id)
local stored = redis.call('GET', entry)
local changed = (not before) or tonumber(before) <= now or stored ~= json
-- A drain request is for the process that was asked: a new one under this id (no live entry,
-- or one of another start time) starts without it.
if changed then
  local fresh = (not before) or tonumber(before) <= now or (not stored)
  if not fresh then
    local ok_old, old_entry = pcall(cjson.decode, stored)
    local ok_new, new_entry = pcall(cjson.decode, json)
    fresh = not (ok_old and ok_new) or old_entry.startedAtMs ~= new_entry.startedAtMs
  end
  if fresh then
    redis.call('HDEL', drains, id)
  end
end
redis.call('SET', entry, json, 'PX', ttl)
redis.call('ZADD', index, expires, id)
local gone = redis.call('ZRANGEBYSCORE', index, '-inf', now)
if #gone > 0 then
  redis.call('ZREMRANGEBYSCORE', index, '-inf', now)
  for _, gone_id in ipairs(gone) do
    redis.call('HDEL', drains, gone_id)
  end
  changed = true
end
-- A missing version with a live index: written by an older release of this script.
if changed or redis.call('EXISTS', version) == 0 then
  bump_registry_version(version)
end
local last = redis.call('ZRANGE', index, -1, -1, 'WITHSCORES')
redis.call('PEXPIREAT', index, last[2])
redis.call('PEXPIREAT', version, last[2])
redis.call('PEXPIREAT', drains, last[2])
return {expires, redis.call('HGET', drains, id)}
