-- list_page: one shard's part of an owner listing. Drops the shard's terminal entries past
-- their retention first (so the owner's index counts only kept tasks), then answers the
-- index's size and its newest `top` ids: the whole listing reads each shard's top
-- offset + limit and the records of one page, whatever the owner holds.
--
-- KEYS[1] owner_index  KEYS[2] terminal  KEYS[3] terminal sizes  KEYS[4] terminal bytes
-- KEYS[5] push due (an evicted task leaves it: evict_terminal.lua)
-- ARGV[1] key prefix (the shard's hash tag)  ARGV[2] top (0: none, -1: every id)
--   ARGV[3] most expired entries to drop in this call
-- Returns {count, {id, created_ms, id, created_ms, ...}} newest first.

-- @include "now_ms"
-- @include "evict_terminal"

local owner_index, retained = KEYS[1], retained_keys(KEYS, 2)
retained.push_due = KEYS[5]
local prefix, top, prune = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
prune_expired(retained, prefix, now_ms(), prune)
local count = redis.call('ZCARD', owner_index)
if count == 0 then
  return {0, {}}
end
if top == 0 then
  return {count, {}}
end
local last = -1
if top > 0 then last = top - 1 end
return {count, redis.call('ZRANGE', owner_index, 0, last, 'REV', 'WITHSCORES')}
