-- now_ms(): the Redis server clock in milliseconds. Every deadline is taken from it, never from
-- a client, so clock skew between gateways and workers cannot move a lease.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
