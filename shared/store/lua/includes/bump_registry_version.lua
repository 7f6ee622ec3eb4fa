-- bump_registry_version(key): moves the registry version (a string of digits) past every value
-- it ever held: max(old + 1, Redis clock in microseconds). The key expires with the registry
-- index, so the clock term keeps a version that comes back after that from repeating one a
-- gateway still caches (a repeat would hide a change). Exact in Lua's doubles until 2^53 us
-- (year 2255).
local function bump_registry_version(key)
  local t = redis.call('TIME')
  local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local old = tonumber(redis.call('GET', key) or '0') or 0
  local new = math.max(old + 1, now_us)
  redis.call('SET', key, string.format('%.0f', new))
  return new
end
