-- deregister_worker: removes one worker's registry entry at once (clean shutdown), and moves
-- the index's own expiry to the latest deadline left in it.
--
-- KEYS[1] registry index (sorted set: worker id -> expiry ms)  KEYS[2] the worker's entry
-- ARGV[1] worker id
-- Returns 1 when the worker was registered, else 0.

local index, entry = KEYS[1], KEYS[2]
local removed = redis.call('ZREM', index, ARGV[1])
redis.call('DEL', entry)
local last = redis.call('ZRANGE', index, -1, -1, 'WITHSCORES')
if last[2] then
  redis.call('PEXPIREAT', index, last[2])
end
return removed
