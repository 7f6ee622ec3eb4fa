-- evict(retained, prefix, member) and prune_expired(retained, prefix, now, limit): the two
-- ways a retained terminal task leaves before or at its retention (create.lua, list_page.lua).
-- `retained` holds the shard's retained-task keys, which the caller declares
-- (retained_keys); `member` is the task's entry in the `terminal` set, `<owner hash>:<id>`
-- (see finish_task.lua); `prefix` is the shard's hash tag, from which the evicted task's keys
-- are named (in this slot): the one kind of undeclared key left, since no caller can know
-- which task is oldest before the script runs (docs/store.md, Redis layout). The task's push
-- notification configs, cursors and outbox (push/mod.rs) go with it, and it leaves the
-- shard's push due set (`retained.push_due`, which the caller declares too): nobody could
-- read or delete them once the task is gone, and their bytes were counted in its size
-- (finish_task.lua, push_bytes.lua).
-- @include "num_str"

-- retained_keys(keys, from): the retained-task keys a script declares at keys[from ..]:
-- terminal (sorted set), its sizes (hash: member -> bytes) and their sum (`Keys::retained`).
-- `push_due`, the shard's push due set: set by the callers of evict and prune_expired, which
-- declare it right after these three (`Keys::push_due`).
local function retained_keys(keys, from)
  return {terminal = keys[from], terminal_sizes = keys[from + 1], terminal_bytes = keys[from + 2]}
end

local function evict(retained, prefix, member)
  local split = string.find(member, ':', 1, true)
  if split then
    local owner, id = string.sub(member, 1, split - 1), string.sub(member, split + 1)
    redis.call('DEL', prefix .. ':task:' .. id, prefix .. ':events:' .. id,
      prefix .. ':push:' .. id, prefix .. ':push-cur:' .. id, prefix .. ':push-out:' .. id)
    redis.call('ZREM', retained.push_due, id)
    redis.call('ZREM', prefix .. ':owner:' .. owner, id)
  end
  redis.call('ZREM', retained.terminal, member)
  -- Its bytes leave the shard's sum (finish_task.lua recorded them; an entry of an older
  -- layout has none).
  local size = redis.call('HGET', retained.terminal_sizes, member)
  if size then
    redis.call('HDEL', retained.terminal_sizes, member)
    if redis.call('DECRBY', retained.terminal_bytes, size) <= 0 then
      redis.call('DEL', retained.terminal_bytes)
    end
  end
end

-- The bytes the shard's retained terminal tasks take, as finish_task.lua measured them.
local function retained_bytes(retained)
  return tonumber(redis.call('GET', retained.terminal_bytes) or '0')
end

-- Drops up to `limit` entries whose retention has passed (their records expired already, or
-- are about to): their owners' indexes stop counting them.
local function prune_expired(retained, prefix, now, limit)
  local expired = redis.call('ZRANGE', retained.terminal, '-inf', num_str(now), 'BYSCORE',
    'LIMIT', '0', num_str(limit))
  for _, member in ipairs(expired) do
    evict(retained, prefix, member)
  end
  return #expired
end
