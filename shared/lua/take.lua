-- take: claims queued tasks for a worker, oldest first, up to a maximum. The caller peeked the
-- candidate ids from the head of the queues and declares their task keys; this script re-checks
-- each one, so a candidate that another worker took meanwhile is skipped, and a queue entry
-- whose task is no longer queued (claimed by id, cancelled, expired) is dropped.
--
-- KEYS[1] leases, KEYS[2 .. 1+Q] queues, KEYS[2+Q ..] candidate task keys
-- ARGV[1] claimer id  ARGV[2] lease ttl ms  ARGV[3] max claims  ARGV[4] Q
-- ARGV[5 ..] per candidate: queue index (1-based), task id
-- Returns a flat list, 9 entries per claim:
--   id, epoch, lease_expires, owner, invocation, attempt, max_attempts, entrypoint, created

-- @include "now_ms"

local leases = KEYS[1]
local claimer, ttl, max, q = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local now = now_ms()
local out = {}
local claimed = 0
local candidates = (#ARGV - 4) / 2

for i = 1, candidates do
  if claimed >= max then break end
  local queue = KEYS[1 + tonumber(ARGV[3 + 2 * i])]
  local id = ARGV[4 + 2 * i]
  local task = KEYS[1 + q + i]
  local f = redis.call('HMGET', task, 'status', 'phase', 'owner', 'invocation', 'attempt',
    'max_attempts', 'entrypoint', 'created')
  if f[1] == 'running' and f[2] == 'queued' then
    local epoch = redis.call('HINCRBY', task, 'epoch', 1)
    local expires = now + ttl
    redis.call('HSET', task, 'phase', 'prepared', 'lease_owner', claimer, 'lease_expires', expires)
    redis.call('ZADD', leases, expires, id)
    redis.call('ZREM', queue, id)
    claimed = claimed + 1
    local n = #out
    out[n + 1] = id
    out[n + 2] = epoch
    out[n + 3] = expires
    out[n + 4] = f[3]
    out[n + 5] = f[4]
    out[n + 6] = tonumber(f[5])
    out[n + 7] = tonumber(f[6])
    out[n + 8] = f[7]
    out[n + 9] = tonumber(f[8])
  elseif f[2] ~= 'queued' then
    redis.call('ZREM', queue, id)
  end
end
return out
