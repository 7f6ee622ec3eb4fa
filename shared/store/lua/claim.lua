-- claim: takes a prepared lease on one task by id (upstream claimExecution): the task must be
-- running, reserved, queued or prepared, with no live lease. Each claim increments the task's
-- fencing epoch. An active task whose lease expired is left to recovery, which counts attempts.
-- A task held for a settlement (hold.lua) is its admission's until the settlement is known,
-- expired claim or not.
--
-- KEYS[1] task  KEYS[2] leases  KEYS[3] admissions  KEYS[4] queue of the task's entrypoint
-- ARGV[1] task id  ARGV[2] claimer id  ARGV[3] lease ttl ms
-- Returns {1, epoch, lease_expires, owner, invocation, attempt, max_attempts, entrypoint, created}
--       | {0, 'MISSING' | 'NOT_RUNNING' | 'LEASED' | 'EXPIRED'}
-- 'EXPIRED': a reservation whose admission expired; the caller reaps it (it becomes cancelled).

-- @include "now_ms"
-- @include "num_str"
-- @include "lease_index"
-- @include "lease_field"

local task, leases, admissions, queue = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local id, claimer = ARGV[1], ARGV[2]

local f = redis.call('HMGET', task, 'st', 'ph', 'ls', 'ax',
  'ow', 'iv', 'at', 'ma', 'en', 'cr', 'sh')
if not f[1] then return {0, 'MISSING'} end
if f[1] ~= 'running' then return {0, 'NOT_RUNNING'} end
if f[11] == '1' then return {0, 'LEASED'} end
local now = now_ms()
local lease_expires, _, _, held_epoch = lease_unpack(f[3])
if lease_expires and lease_expires > now then return {0, 'LEASED'} end
if f[2] == 'active' then return {0, 'LEASED'} end
-- A waiting task runs again only when its owner resumes it.
if f[2] == 'waiting' then return {0, 'NOT_RUNNING'} end
-- A task in a retry's backoff runs again when the sweep queues it (retry_later.lua).
if f[2] == 'backoff' then return {0, 'LEASED'} end
if f[2] == 'reserved' and f[4] and tonumber(f[4]) <= now then return {0, 'EXPIRED'} end

local epoch = tonumber(held_epoch or '0') + 1
local expires = now + tonumber(ARGV[3])
local expires_s = num_str(expires)
redis.call('HSET', task, 'ph', 'prepared', 'lo', claimer,
  'ls', lease_pack(expires_s, '', '', num_str(epoch)))
if f[4] then
  redis.call('HDEL', task, 'ax')
  redis.call('ZREM', admissions, id)
end
redis.call('ZREM', queue, id)
local indexed = {expires_s, id}
pin_lease_index(indexed)
redis.call('ZADD', leases, unpack(indexed))
return {1, epoch, expires, f[5], f[6], tonumber(f[7]), tonumber(f[8]), f[9], tonumber(f[10])}
