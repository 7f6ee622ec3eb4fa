-- renew: extends many leases of one holder in one call (the worker heartbeat). A lease is
-- extended only while it is the task's current lease and still live; an expired lease is never
-- revived. A claim held for a settlement (hold.lua) is extended but stays out of the lease
-- index: no sweep is to find it due.
--
-- KEYS[1] leases, KEYS[2 ..] task keys
-- ARGV[1] lease ttl ms  ARGV[2] 'prepared' (only prepared claims) | 'any'
-- ARGV[3 ..] per task: task id, holder id, epoch
-- Returns one integer per task: the new deadline, or 0 when the lease is lost.

-- Every lease of the call gets the same deadline, formatted once (num_str.lua), and the
-- lease index takes them in one ZADD (variadic.lua).
-- @include "now_ms"
-- @include "num_str"
-- @include "variadic"
-- @include "lease_field"

local leases = KEYS[1]
local ttl, only_prepared = tonumber(ARGV[1]), ARGV[2] == 'prepared'
local now = now_ms()
local expires = now + ttl
local expires_s = num_str(expires)
local out, indexed = {}, {}
for i = 2, #KEYS do
  local task = KEYS[i]
  local base = 3 + (i - 2) * 3
  local id, holder, epoch = ARGV[base], ARGV[base + 1], ARGV[base + 2]
  -- lease_is_live (includes/lease_is_live.lua), with the phase and hold in the same read.
  local f = redis.call('HMGET', task, 'st', 'lo', 'ls', 'ph', 'sh')
  local lease_expires, _, _, held_epoch = lease_unpack(f[3])
  local ok = f[1] == 'running' and f[2] == holder and held_epoch == epoch
    and lease_expires and lease_expires > now
  if ok and only_prepared then
    ok = f[4] == 'prepared'
  end
  if ok then
    redis.call('HSET', task, 'ls', lease_renewed(f[3], expires_s))
    if f[5] ~= '1' then
      indexed[#indexed + 1] = expires_s
      indexed[#indexed + 1] = id
    end
    out[#out + 1] = expires
  else
    out[#out + 1] = 0
  end
end
if #indexed > 0 then variadic('ZADD', leases, indexed, 2) end
return out
