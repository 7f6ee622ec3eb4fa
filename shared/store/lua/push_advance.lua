-- push_advance: moves one config's cursor from `expected` to `next` (compare and set), so a
-- deliverer whose claim expired while it worked cannot move a cursor another one moved since,
-- and a deleted config stays deleted.
--
-- KEYS[1] cursors
-- ARGV[1] config id  ARGV[2] the cursor as read  ARGV[3] the new cursor
-- Returns 1 moved | 0 the cursor changed or is gone.

local cursors = KEYS[1]
if redis.call('HGET', cursors, ARGV[1]) ~= ARGV[2] then return 0 end
redis.call('HSET', cursors, ARGV[1], ARGV[3])
return 1
