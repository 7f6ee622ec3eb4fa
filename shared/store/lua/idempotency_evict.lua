-- idempotency_evict: drops one done record to make room at the record bound (see
-- idempotency_begin.lua, which names it). Only a record still listed as done goes: one a
-- concurrent request already evicted, or that expired, is left alone.
--
-- KEYS[1] the record  KEYS[2] done ids (zset)
-- ARGV[1] the record's id (its key without the prefix)
-- Returns 1 when evicted, 0 when it was no longer listed as done.

-- @include "idempotency_index"

local record, done, id = KEYS[1], KEYS[2], ARGV[1]

if redis.call('ZREM', done, id) == 0 then
  return 0
end
if redis.call('HGET', record, 'state') == 'done' then
  redis.call('DEL', record)
end
expire_index(done)
return 1
