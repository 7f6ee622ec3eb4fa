-- streams spike, renew: extends the leases of a batch of entries of one consumer. XCLAIM with
-- min-idle 0 and JUSTID resets an entry's idle time (its lease age) without raising its delivery
-- count (its epoch); XCLAIM alone would also take an entry that another consumer reclaimed, so
-- only the entries still pending to this consumer with the expected count are renewed.
--
-- KEYS[1] stream
-- ARGV[1] group  ARGV[2] consumer  ARGV[3] lowest entry id  ARGV[4] highest  ARGV[5] XPENDING bound
-- ARGV[6 ..] per item: entry id, expected delivery count
-- Returns the ids renewed.

local stream, group, consumer = KEYS[1], ARGV[1], ARGV[2]
local bound = tonumber(ARGV[5])
local held = held_by(stream, group, consumer, ARGV[3], ARGV[4], bound)

local args = {'XCLAIM', stream, group, consumer, 0}
for a = 6, #ARGV, 2 do
  local id = ARGV[a]
  if held(id, tonumber(ARGV[a + 1])) then args[#args + 1] = id end
end
if #args == 5 then return {} end
args[#args + 1] = 'JUSTID'
return redis.call(unpack(args))
