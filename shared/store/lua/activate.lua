-- activate: prepared -> active for current live claims, many at once (a worker activates what
-- one take gave it, and concurrent activations of one process are sent together). Counts an
-- attempt and starts the hard run deadline; from here the lease is renewed by heartbeat. A claim
-- held for a settlement (hold.lua) is not activated: its receipt queues the task first.
--
-- KEYS[1] leases, KEYS[2 ..] task keys
-- ARGV per task, 5 values: task id, holder id, epoch, lease ttl ms, max run ms
-- Returns per task: {attempt, lease_expires, run_deadline} | 0 when fenced out.

-- @include "now_ms"
-- @include "num_str"
-- @include "lease_field"

local leases = KEYS[1]
local now = now_ms()
local out = {}
for i = 2, #KEYS do
  local task = KEYS[i]
  local b = (i - 2) * 5
  local id, holder, epoch = ARGV[b + 1], ARGV[b + 2], ARGV[b + 3]
  local f = redis.call('HMGET', task, 'st', 'lo', 'ls', 'ph', 'at', 'sh')
  local lease_expires, _, _, held_epoch = lease_unpack(f[3])
  if f[1] == 'running' and f[2] == holder and held_epoch == epoch and lease_expires
      and lease_expires > now and f[4] == 'prepared' and f[6] ~= '1' then
    local attempt = tonumber(f[5] or '0') + 1
    local expires = now + tonumber(ARGV[b + 4])
    local deadline = now + tonumber(ARGV[b + 5])
    local expires_s = num_str(expires)
    redis.call('HSET', task, 'ph', 'active', 'at', num_str(attempt),
      'ls', lease_pack(expires_s, num_str(deadline), ARGV[b + 5], epoch))
    redis.call('ZADD', leases, expires_s, id)
    out[#out + 1] = {attempt, expires, deadline}
  else
    out[#out + 1] = 0
  end
end
return out
