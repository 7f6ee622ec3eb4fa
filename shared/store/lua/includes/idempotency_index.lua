-- Helpers of the idempotency record index (idempotency_*.lua): two sorted sets of record ids
-- scored by expiry in microseconds of the Redis clock (exact in a double, so that two records
-- finished back to back still sort in their order).

local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- A whole number as Redis reads it: Lua's own conversion keeps 14 digits, too few here.
local function int(n)
  return string.format('%.0f', n)
end

-- The index lives as long as its longest-lived id, no longer, so that nothing outlives the
-- records; called after every change of the set (an empty set is gone already).
local function expire_index(index)
  local last = redis.call('ZRANGE', index, -1, -1, 'WITHSCORES')
  if last[2] then
    redis.call('PEXPIREAT', index, int(math.ceil(tonumber(last[2]) / 1000)))
  end
end
