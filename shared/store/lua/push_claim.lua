-- push_claim: claims up to `limit` of a shard's tasks whose deliveries are due, for lease ms:
-- each is scored by its claim's expiry, so no other deliverer takes it meanwhile, and a
-- deliverer that dies leaves it due again once the claim expires.
-- Fair to client addresses: each task counts under the address of its latest config's put
-- (the record's `pa`, push_put.lua), or its owner hash when it has none, so minting tokens
-- buys no more slots than one. The caller says how many tasks of each such group it has
-- under way, and how many in all. Due tasks of groups under their `share` are claimed first,
-- in due order; then, while the caller's tasks under way stay below `cap` (its slots less a
-- reserve), those of groups at their share; any left of those are moved `postpone` ms ahead
-- (here: no round trip), so that a flood neither holds the reserve nor stands in front of
-- other groups' tasks. A slot of the reserve only goes to a group with nothing under way, so
-- no one address takes more than one of it. At most `scan` due tasks are looked at.
-- The task records' names are derived from the due set's (same hash tag, same slot).
--
-- KEYS[1] due (sorted set: task id by when its deliveries are due, ms, Redis clock)
-- ARGV[1] lease ms  ARGV[2] limit  ARGV[3] scan  ARGV[4] share  ARGV[5] postpone ms
-- ARGV[6] tasks under way at the caller  ARGV[7] cap
-- ARGV[8 ..] pairs: group, tasks of that group under way at the caller
-- Returns id1, group1, id2, group2, ... of the claimed tasks: a group is 'a:<address>' or
-- 'o:<owner hash>', '' when the record is gone.
-- @include "now_ms"

local due = KEYS[1]
local lease, limit, scan = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local share, postpone = tonumber(ARGV[4]), tonumber(ARGV[5])
local total, cap = tonumber(ARGV[6]), tonumber(ARGV[7])
local under_way = {}
for i = 8, #ARGV, 2 do
  under_way[ARGV[i]] = tonumber(ARGV[i + 1])
end
local prefix = string.sub(due, 1, -10)
local now = now_ms()
local ids = redis.call('ZRANGEBYSCORE', due, '-inf', now, 'LIMIT', 0, scan)
local claimed, count, busy = {}, 0, {}

local function claim(id, group)
  redis.call('ZADD', due, 'XX', now + lease, id)
  if group ~= '' then under_way[group] = (under_way[group] or 0) + 1 end
  claimed[#claimed + 1] = id
  claimed[#claimed + 1] = group
  count = count + 1
end

for _, id in ipairs(ids) do
  if count >= limit then break end
  local f = redis.call('HMGET', prefix .. ':task:' .. id, 'ow', 'pa')
  local group = ''
  if f[2] then group = 'a:' .. f[2] elseif f[1] then group = 'o:' .. f[1] end
  local held = under_way[group] or 0
  if group == '' or (held < share and (total + count < cap or held == 0)) then
    claim(id, group)
  else
    busy[#busy + 1] = {id, group}
  end
end
for _, task in ipairs(busy) do
  if count < limit and total + count < cap then
    claim(task[1], task[2])
  else
    redis.call('ZADD', due, 'XX', now + postpone, task[1])
  end
end
return claimed
