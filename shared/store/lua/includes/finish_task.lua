-- finish_task(k, id, phase, retention_ms): bookkeeping of every terminal transition, in one place so
-- that no path can skip it. k holds the key names: task, events, leases, admissions, live,
-- owner_index, owner_live, queue; phase is the task's phase before the transition (nil:
-- unknown). The caller's own HSET of the transition sets status and updated (one HSET per
-- transition). This drops the index entries that phase can hold, and the fields only a task
-- that can still run needs: its phase (a terminal status implies it), lease, admission, fence
-- epoch, hand-off flag, settlement hold, run deadline and limit, the entrypoint (the invocation names it
-- too) and a waiting task's input request. A retained task is smaller without them and nothing reads them once it is terminal;
-- the attempt count and its limit stay, for the record of how it ran. Field names:
-- redis/fields.rs.
-- Invariants: the task leaves the live set exactly once (SREM is idempotent and only terminal
-- transitions call this), so SCARD(live) is the exact cluster-wide count of non-terminal tasks;
-- the task and its event log expire after retention; the owner's index expires once the owner
-- has no live task left, retention after its last task finished.
-- The client address's live set, when the record names one (`sl`, create.lua), loses the id
-- in the same step as `live`.
-- Retained budget (create.lua): the task enters the shard's `terminal` sorted set, scored by
-- when it expires (its own retention `rt` when it has one, as a direct invoke does, else the
-- store's), as `<owner hash>:<id>` so that eviction and pruning can drop its owner-index entry
-- even after the record itself expired. The set's name is derived from `live`'s (same hash
-- tag, so the same slot): every caller already declares `live`, and no key layout of the
-- three scripts that finish tasks has to move for it.
local function terminal_key(live)
  return string.sub(live, 1, -5) .. 'terminal'
end

local function finish_task(k, id, phase, retention_ms)
  local kept = redis.call('HMGET', k.task, 'ow', 'rt', 'sl')
  local ttl = tonumber(kept[2]) or retention_ms
  redis.call('HDEL', k.task, 'ph', 'lo', 'lx', 'ax', 'ec', 'ho', 'sh', 'rd', 'rm', 'en', 'iq', 'rt',
    'sl')
  if phase ~= 'queued' and phase ~= 'reserved' then
    redis.call('ZREM', k.leases, id)
  end
  if phase == nil or phase == 'reserved' or phase == 'waiting' then
    redis.call('ZREM', k.admissions, id)
  end
  if phase == nil or phase == 'queued' then
    redis.call('ZREM', k.queue, id)
  end
  if redis.call('SREM', k.live, id) == 1 then
    if kept[3] then
      -- The client address's live set (create.lua), named by the record: same hash tag, so
      -- the same slot; ZREM is idempotent, and this runs once per task anyway.
      redis.call('ZREM', kept[3], id)
    end
    local left = redis.call('DECR', k.owner_live)
    if left <= 0 then
      redis.call('DEL', k.owner_live)
      -- The store's retention, never a task's shorter one, while older tasks of the owner
      -- may still be kept that long; an index of this task alone (a direct run's owner)
      -- goes with it.
      local index_ttl = math.max(retention_ms, ttl)
      if redis.call('ZCARD', k.owner_index) <= 1 then index_ttl = ttl end
      redis.call('PEXPIRE', k.owner_index, index_ttl)
    end
    if kept[1] then
      local terminal = terminal_key(k.live)
      redis.call('ZADD', terminal, now_ms() + ttl, kept[1] .. ':' .. id)
      -- Retained bytes (create.lua's max retained bytes): what the record and its log take
      -- now, plus the result or error once more for the terminal event appended after this.
      -- SAMPLES 0 counts every field and event: the default samples five fields of a hash
      -- and extrapolates, which misses the one large field (input or result) more often than
      -- not. The size is kept by entry (`terminal:sizes`) beside the shard's sum
      -- (`terminal:bytes`), so that eviction and pruning take back exactly what was added,
      -- even once the record itself expired.
      local size = (redis.call('MEMORY', 'USAGE', k.task, 'SAMPLES', 0) or 0)
        + (redis.call('MEMORY', 'USAGE', k.events, 'SAMPLES', 0) or 0)
        + redis.call('HSTRLEN', k.task, 'rs') + redis.call('HSTRLEN', k.task, 'er')
      redis.call('HSET', terminal .. ':sizes', kept[1] .. ':' .. id, size)
      redis.call('INCRBY', terminal .. ':bytes', size)
      -- The set expires with its last entry, like every key of a retained task; its sizes
      -- and their sum with it (the three always get the same expiry at the same moment).
      if redis.call('PTTL', terminal) < ttl then
        redis.call('PEXPIRE', terminal, ttl)
        redis.call('PEXPIRE', terminal .. ':sizes', ttl)
        redis.call('PEXPIRE', terminal .. ':bytes', ttl)
      end
    end
  end
  redis.call('PEXPIRE', k.task, ttl)
  redis.call('PEXPIRE', k.events, ttl)
end
