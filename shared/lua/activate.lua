-- activate: prepared -> active for the current live claim. Counts an attempt and starts the
-- hard run deadline; from here the lease is renewed by the worker heartbeat.
--
-- KEYS[1] task  KEYS[2] leases
-- ARGV[1] task id  ARGV[2] holder id  ARGV[3] epoch  ARGV[4] lease ttl ms  ARGV[5] max run ms
-- Returns {attempt, lease_expires, run_deadline} | false when fenced out.

-- @include "now_ms"
-- @include "lease_is_live"

local task, leases = KEYS[1], KEYS[2]
local now = now_ms()
if not lease_is_live(task, ARGV[2], ARGV[3], now) then return false end
if redis.call('HGET', task, 'phase') ~= 'prepared' then return false end

local attempt = redis.call('HINCRBY', task, 'attempt', 1)
local expires = now + tonumber(ARGV[4])
local deadline = now + tonumber(ARGV[5])
redis.call('HSET', task, 'phase', 'active', 'lease_expires', expires,
  'run_deadline', deadline, 'run_ms', ARGV[5])
redis.call('ZADD', leases, expires, ARGV[1])
return {attempt, expires, deadline}
