-- finish_task(k, id, phase, retention_ms, now, known): bookkeeping of every terminal transition,
-- in one place so that no path can skip it. k holds the key names: task, events, leases,
-- admissions, live, owner_index, owner_live, queue, the shard's retained-task keys
-- terminal, terminal_sizes, terminal_bytes (`Keys::retained`), and push, the task's push keys
-- (push_keys in push_outbox.lua: `Keys::push_of`); phase is the task's phase before the
-- transition (nil: unknown). The caller's own HSET of the transition sets status and updated (one
-- HSET per transition). This drops the index entries that phase can hold, and the fields only a
-- task that can still run needs: its phase (a terminal status implies it), lease (with the run
-- deadline and limit: lease_field.lua), admission, fence epoch, hand-off flag, settlement hold,
-- the entrypoint (the invocation
-- names it too), a waiting task's input request and the notify channel of the process that
-- followed it (publish_event). A retained task is smaller without them and nothing reads them once
-- it is terminal; the attempt count and its limit stay, for the record of how it ran. Field names:
-- redis/fields.rs.
-- Invariants: the task leaves the live set exactly once (SREM is idempotent and only terminal
-- transitions call this), so SCARD(live) is the exact cluster-wide count of non-terminal tasks;
-- the task and its event log expire after retention; the owner's index expires once the owner
-- has no live task left, retention after its last task finished.
-- The client address's live set (create.lua) is left alone: its finished ids are dropped by
-- the next creation from that address that finds the set at its bound, so that no script
-- touches a set its caller cannot name.
-- Retained budget (create.lua): the task enters the shard's `terminal` sorted set, scored by
-- when it expires (its own retention `rt` when it has one, as a direct invoke does, else the
-- store's), as `<owner hash>:<id>` so that eviction and pruning can drop its owner-index entry
-- even after the record itself expired.
-- `known`, when the caller's own HMGET read them (swap_task), saves reading them again:
-- {owner = ow, retention = rt, seq = sq before the terminal event,
-- sizes = the length of the result and error the record now holds}. Without it they are read
-- here. A task whose seq was still 1 logged no event (every logged event takes a seq above
-- the creation's), so it has no event log to measure or to expire.
-- @include "push_bytes"
-- @include "variadic"
-- @include "num_str"
local TERMINAL_SLACK_MS = 1000

-- Batches: the bookkeeping that touches the shard's shared keys (the lease and admission
-- indexes, the live set, the owner's live counter and index, the retained-task set, sizes and
-- sum) is the same few keys for every task a script finishes, so a script that finishes many
-- (cas.lua, finish_take.lua: a worker's concurrent finishes) gathers it in `acc`
-- (finish_batch()) and writes it with one variadic command per key in finish_flush(acc):
-- one ZREM, one SMISMEMBER + SREM, one DECRBY per owner, one ZADD, one HSET and one INCRBY
-- per call instead of per task. Nothing between a finish_task and its flush reads those keys
-- about the finished tasks (a script is atomic and the flush ends its finishes), so the
-- result equals the per-task writes. Without `acc`, finish_task flushes its own at once.
local function finish_batch()
  return {leases = {}, admissions = {}, done = {}}
end

local function finish_flush(acc)
  if #acc.leases > 0 then variadic('ZREM', acc.k.leases, acc.leases, 1) end
  if #acc.admissions > 0 then variadic('ZREM', acc.k.admissions, acc.admissions, 1) end
  local done = acc.done
  if #done == 0 then return end
  local k = acc.k
  -- Exactly the tasks still in the live set leave it (SMISMEMBER says which, SREM takes them
  -- out), so the count cannot drift whatever crashes, sweeps and races happen.
  local ids = {}
  for i, d in ipairs(done) do ids[i] = d.id end
  local member_of = variadic('SMISMEMBER', k.live, ids, 1)
  local left_live, owners, owner_order = {}, {}, {}
  for i, d in ipairs(done) do
    if member_of[i] == 1 then
      left_live[#left_live + 1] = d
      local o = owners[d.owner_live]
      if not o then
        o = {n = 0, ttl = 0, index = d.owner_index}
        owners[d.owner_live] = o
        owner_order[#owner_order + 1] = d.owner_live
      end
      o.n = o.n + 1
      if d.ttl > o.ttl then o.ttl = d.ttl end
    end
  end
  if #left_live == 0 then return end
  local gone = {}
  for i, d in ipairs(left_live) do gone[i] = d.id end
  variadic('SREM', k.live, gone, 1)
  for _, key in ipairs(owner_order) do
    local o = owners[key]
    local left = redis.call('DECRBY', key, num_str(o.n))
    if left <= 0 then
      redis.call('DEL', key)
      -- The store's retention, never a task's shorter one, while older tasks of the owner
      -- may still be kept that long; an index of these tasks alone goes with them. (Only a
      -- shorter retention than the store's asks the index's size: otherwise both give the
      -- same expiry.) An owner without an index (a private owner's: create.lua) has nothing
      -- to expire.
      local index_ttl = math.max(acc.retention_ms, o.ttl)
      local indexed = nil
      if o.ttl < acc.retention_ms then
        indexed = redis.call('ZCARD', o.index)
        if indexed <= o.n then index_ttl = o.ttl end
      end
      if indexed ~= 0 then redis.call('PEXPIRE', o.index, num_str(index_ttl)) end
    end
  end
  local scored, sized, bytes, ttl_max = {}, {}, 0, 0
  for _, d in ipairs(left_live) do
    if d.member then
      scored[#scored + 1] = d.score
      scored[#scored + 1] = d.member
      sized[#sized + 1] = d.member
      sized[#sized + 1] = num_str(d.size)
      bytes = bytes + d.size
      if d.ttl > ttl_max then ttl_max = d.ttl end
    end
  end
  if #scored == 0 then return end
  local terminal = k.terminal
  variadic('ZADD', terminal, scored, 2)
  variadic('HSET', k.terminal_sizes, sized, 2)
  redis.call('INCRBY', k.terminal_bytes, num_str(bytes))
  -- The set expires with its last entry (up to TERMINAL_SLACK_MS later), like every key
  -- of a retained task; its sizes and their sum with it (the three always get the same
  -- expiry at the same moment). The slack spares the three PEXPIREs to the finishes of
  -- the next second.
  if redis.call('PTTL', terminal) < ttl_max then
    local until_ms = num_str(ttl_max + TERMINAL_SLACK_MS)
    redis.call('PEXPIRE', terminal, until_ms)
    redis.call('PEXPIRE', k.terminal_sizes, until_ms)
    redis.call('PEXPIRE', k.terminal_bytes, until_ms)
  end
end

-- Returns whether the task has push configs (so that the terminal event's push_outbox need
-- not ask again).
local function finish_task(k, id, phase, retention_ms, now, known, acc)
  local own = acc == nil
  if own then acc = finish_batch() end
  acc.k = k
  acc.retention_ms = retention_ms
  if not known then
    local f = redis.call('HMGET', k.task, 'ow', 'rt', 'sq')
    known = {owner = f[1], retention = f[2], seq = f[3]}
  end
  local ttl = tonumber(known.retention) or retention_ms
  local logged = tonumber(known.seq or '0') ~= 1
  -- The client address push deliveries share slots by (`pa`) stays only while the task has
  -- push configs (a config put later sets it again: push_put.lua).
  local dropped
  if phase == 'active' and known.fields_known then
    -- An active task holds exactly these of the fields dropped (take_queued.lua and
    -- activate.lua write the lease and run fields; every way into `queued` or `prepared`
    -- dropped the admission, hold and input-request fields), and the caller read whether it
    -- has a retention and a notify channel: naming a field the record lacks costs a scan of
    -- the whole record (docs/performance.md, "What a command costs inside a script").
    dropped = {'ph', 'lo', 'ls', 'ho', 'en'}
    if known.retention then dropped[#dropped + 1] = 'rt' end
    if known.notify then dropped[#dropped + 1] = 'nc' end
  else
    dropped = {'ph', 'lo', 'ls', 'ax', 'ho', 'sh', 'en', 'iq', 'rt', 'nc'}
  end
  -- The caller may know that none of its items has push configs (acc.no_push:
  -- no_push_configs in swap_item.lua).
  local has_push = false
  if not acc.no_push then has_push = redis.call('EXISTS', k.push.configs) == 1 end
  if not has_push then dropped[#dropped + 1] = 'pa' end
  redis.call('HDEL', k.task, unpack(dropped))
  if phase ~= 'queued' and phase ~= 'reserved' then
    acc.leases[#acc.leases + 1] = id
  end
  if phase == nil or phase == 'reserved' or phase == 'waiting' or phase == 'backoff' then
    acc.admissions[#acc.admissions + 1] = id
  end
  if phase == nil or phase == 'queued' then
    redis.call('ZREM', k.queue, id)
  end
  local d = {id = id, owner_live = k.owner_live, owner_index = k.owner_index, ttl = ttl}
  if known.owner then
    d.member = known.owner .. ':' .. id
    d.score = num_str(now + ttl)
    -- Retained bytes (create.lua's max retained bytes): what the record and its log take
    -- now, plus the result or error once more for the terminal event appended after this.
    -- SAMPLES 0 counts every field and event: the default samples five fields of a hash
    -- and extrapolates, which misses the one large field (input or result) more often than
    -- not. The size is kept by entry (`terminal:sizes`) beside the shard's sum
    -- (`terminal:bytes`), so that eviction and pruning take back exactly what was added,
    -- even once the record itself expired. Measured here, before the flush: the record
    -- does not change after this in the script.
    local size = redis.call('MEMORY', 'USAGE', k.task, 'SAMPLES', 0) or 0
    if logged then
      size = size + (redis.call('MEMORY', 'USAGE', k.events, 'SAMPLES', 0) or 0)
    end
    local result_sizes = known.sizes
    if not result_sizes then
      result_sizes = redis.call('HSTRLEN', k.task, 'rs') + redis.call('HSTRLEN', k.task, 'er')
    end
    size = size + result_sizes
    -- Its push configs, cursors and outbox (push_bytes.lua; `k.push`, declared by every
    -- caller: push_keys), and the terminal event once more when configs will keep it in
    -- the outbox.
    if has_push then size = size + push_size(k.push) + result_sizes end
    d.size = size
  end
  acc.done[#acc.done + 1] = d
  local ttl_s = num_str(ttl)
  redis.call('PEXPIRE', k.task, ttl_s)
  if logged then redis.call('PEXPIRE', k.events, ttl_s) end
  if own then finish_flush(acc) end
  return has_push
end
