-- due: ids whose lease or admission deadline has passed, by the Redis clock (read only).
--
-- KEYS[1] leases  KEYS[2] admissions
-- ARGV[1] limit
-- Returns a list of distinct task ids, at most 2 * limit.

-- @include "now_ms"

local now = now_ms()
local seen, out = {}, {}
for _, key in ipairs(KEYS) do
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', key, '-inf', now, 'LIMIT', 0, tonumber(ARGV[1]))) do
    if not seen[id] then
      seen[id] = true
      out[#out + 1] = id
    end
  end
end
return out
