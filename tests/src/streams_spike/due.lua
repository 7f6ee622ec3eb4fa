-- streams spike, due (mode 'record'): adds the tasks of the delayed set whose time has come back
-- to the stream, each as a new entry (its payload from its record), oldest first. Only tasks that
-- asked for a retry pay for it. The records are named from the stream's hash tag (the prefix of
-- KEYS[1]), in the same slot.
--
-- KEYS[1] stream  KEYS[2] delayed set
-- ARGV[1] the tag's key prefix ("{name}")  ARGV[2] most to move
-- Returns how many were added back.

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local due = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, tonumber(ARGV[2]))
for _, task in ipairs(due) do
  local payload = redis.call('HGET', ARGV[1] .. ':task:' .. task, 'iv') or ''
  redis.call('XADD', KEYS[1], '*', 't', task, 'p', payload)
end
if #due > 0 then redis.call('ZREM', KEYS[2], unpack(due)) end
return #due
