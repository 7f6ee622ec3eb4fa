-- evict(terminal, prefix, member) and prune_expired(terminal, prefix, now, limit): the two
-- ways a retained terminal task leaves before or at its retention (create.lua, list_page.lua).
-- `member` is the task's entry in the shard's `terminal` set, `<owner hash>:<id>` (see
-- finish_task.lua); `prefix` is the shard's hash tag, from which the task's keys are named
-- (in this slot). The task's push notification configs, cursors and outbox (push/mod.rs) go
-- with it, and it leaves the shard's push due set: nobody could read or delete them once the
-- task is gone, and their bytes were counted in its size (finish_task.lua, push_bytes.lua).
local function evict(terminal, prefix, member)
  local split = string.find(member, ':', 1, true)
  if split then
    local owner, id = string.sub(member, 1, split - 1), string.sub(member, split + 1)
    redis.call('DEL', prefix .. ':task:' .. id, prefix .. ':events:' .. id,
      prefix .. ':push:' .. id, prefix .. ':push-cur:' .. id, prefix .. ':push-out:' .. id)
    redis.call('ZREM', prefix .. ':push-due', id)
    redis.call('ZREM', prefix .. ':owner:' .. owner, id)
  end
  redis.call('ZREM', terminal, member)
  -- Its bytes leave the shard's sum (finish_task.lua recorded them; an entry of an older
  -- layout has none).
  local sizes = terminal .. ':sizes'
  local size = redis.call('HGET', sizes, member)
  if size then
    redis.call('HDEL', sizes, member)
    if redis.call('DECRBY', terminal .. ':bytes', size) <= 0 then
      redis.call('DEL', terminal .. ':bytes')
    end
  end
end

-- The bytes the shard's retained terminal tasks take, as finish_task.lua measured them.
local function retained_bytes(terminal)
  return tonumber(redis.call('GET', terminal .. ':bytes') or '0')
end

-- Drops up to `limit` entries whose retention has passed (their records expired already, or
-- are about to): their owners' indexes stop counting them.
local function prune_expired(terminal, prefix, now, limit)
  local expired = redis.call('ZRANGE', terminal, '-inf', now, 'BYSCORE', 'LIMIT', 0, limit)
  for _, member in ipairs(expired) do
    evict(terminal, prefix, member)
  end
  return #expired
end
