-- due: ids whose lease or admission deadline has passed, by the Redis clock (read only), with
-- their deadlines, so that a caller sweeping several shards can settle the earliest first.
--
-- KEYS[1] leases  KEYS[2] admissions
-- ARGV[1] limit
-- Returns {id, deadline_ms, ...}: distinct task ids, at most 2 * limit (limit per set).

-- @include "now_ms"

local now = now_ms()
local seen, out = {}, {}
for _, key in ipairs(KEYS) do
  local due = redis.call('ZRANGEBYSCORE', key, '-inf', now, 'WITHSCORES', 'LIMIT', 0, tonumber(ARGV[1]))
  for i = 1, #due, 2 do
    local id = due[i]
    if not seen[id] then
      seen[id] = true
      out[#out + 1] = id
      out[#out + 1] = due[i + 1]
    end
  end
end
return out
