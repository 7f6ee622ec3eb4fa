-- create: stores new tasks (status running), each queued or held reserved. Concurrent creates
-- of one process arrive here together (see redis/batch.rs), so one call admits a batch.
--
-- Capacity counts non-terminal tasks cluster-wide (SCARD live), checked per task in order. When
-- full, the reply carries how many admissions and leases are already due, so the caller reaps
-- them and retries: reaping always happens before capacity is enforced.
--
-- Bounds, all per shard (the caller splits each setting over the shards), checked in order:
--   live tasks (SCARD live) < max tasks                        else CAPACITY
--   the owner's live tasks (owner_live) < max live per owner   else OWNER_LIVE (0: no bound)
--   the client address's live tasks (ZCARD src_live) < max live per address, for a task
--     with a source                                            else ADDRESS_LIVE (0: no bound)
--   the owner's retained tasks (ZCARD owner_index) < max retained per owner: the owner's
--     oldest terminal task is evicted to make room; OWNER_RETAINED when all of them are live
--   retained tasks (SCARD live + ZCARD terminal) < max retained: the terminal task that
--     expires first is evicted; CAPACITY when only live tasks remain
--   retained bytes (the sum finish_task.lua keeps of its terminal tasks' sizes) <= max
--     retained bytes: terminal tasks are evicted, the one that expires first first (never
--     refused: live tasks' bytes are bounded by max tasks and the input limit instead)
-- An evicted task's record, event log and owner-index entry go at once; up to PRUNE terminal
-- entries already past their retention are dropped on every call as well, so the `terminal`
-- set tracks what is really kept (finish_task.lua fills it).
--
-- KEYS[1] live  KEYS[2] admissions  KEYS[3] leases  KEYS[4] terminal  KEYS[5] terminal sizes
-- KEYS[6] terminal bytes (the retained-task keys: evict_terminal.lua)  KEYS[7] push due (an
--   evicted task leaves it)
-- KEYS[8 ..] per task, 6 keys: task, owner_index, owner_live, queue, wake, src_live (the
--   client address's live set; declared for every task, touched only for one with a source)
-- ARGV[1] max tasks  ARGV[2] max retained  ARGV[3] max retained per owner
-- ARGV[4] max live per owner  ARGV[5] max live per address  ARGV[6] max retained bytes (0: no
--   cap)  ARGV[7] key prefix (the shard's hash tag: the keys of an evicted task are named
--   from it and its `terminal` entry, in this slot)
-- ARGV[8 ..] per task, 12 values: id, owner hash, context id ('' for none), invocation json,
--   entrypoint, 'queued' | 'reserved', admission ttl ms, max attempts, retention ms ('' for
--   the store's), source ('' for none: no address bound), notify channel ('' for none: the
--   creating process's channel when it follows the task, kept as `nc` for publish_event),
--   private owner ('1': the owner is a fresh token of this task alone, which no caller holds,
--   as a direct run's is (`NewTask::private_owner`): no owner index is written and no owner
--   bound asked, both of which would answer as for an owner without tasks; '' otherwise)
-- Returns per task: {1, created_ms} | {0, 'DUPLICATE'} | {0, 'CAPACITY', due_count}
--   | {0, 'OWNER_LIVE'} | {0, 'ADDRESS_LIVE'} | {0, 'OWNER_RETAINED'}
-- While the address bound is on, a task with a source enters src_live (scored by creation);
-- a creation that finds the set at its bound first drops the ids no longer in `live`
-- (address_has_room), so finished tasks leave it there, not in the scripts that finish them
-- (which could not declare it); the set expires a day after its last addition, so an address
-- that never returns leaves no key.
-- A task with a source keeps it as `pa` (whatever the address bound): the address its push
-- deliveries share slots under (push_claim.lua).
-- Each created task's seq is 1: its `statusUpdate running`, which is neither logged nor
-- published. The record rebuilds it (redis/event_log.rs), and nobody can listen to a task
-- before its creation except the creator, whose create reply is that event.

-- @include "now_ms"
-- @include "ring_doorbell"
-- @include "evict_terminal"
-- @include "num_str"

local live, admissions, leases = KEYS[1], KEYS[2], KEYS[3]
local retained = retained_keys(KEYS, 4)
retained.push_due = KEYS[7]
local terminal = retained.terminal
local max_tasks, max_retained = tonumber(ARGV[1]), tonumber(ARGV[2])
local max_owner_retained, max_owner_live = tonumber(ARGV[3]), tonumber(ARGV[4])
local max_address_live, max_retained_bytes = tonumber(ARGV[5]), tonumber(ARGV[6])
local prefix = ARGV[7]
local now = now_ms()
local now_s = num_str(now)
-- How long an address's live set outlives its last addition.
local SOURCE_TTL_MS = 86400000
local out = {}

prune_expired(retained, prefix, now, 16)

-- The shard's retained count and bytes are read once per call, not once per task: only an
-- eviction changes them within the call (a script runs alone), and each eviction forgets them
-- (evict_and_forget), so the next bound check reads them again. Evictions are rare (a store at
-- its bounds), so a batch of creations pays one ZCARD and one GET.
local terminal_count, terminal_bytes_known = nil, nil
local function retained_count()
  if not terminal_count then terminal_count = redis.call('ZCARD', terminal) end
  return terminal_count
end
local function retained_bytes_now()
  if not terminal_bytes_known then terminal_bytes_known = retained_bytes(retained) end
  return terminal_bytes_known
end
local function evict_and_forget(member)
  evict(retained, prefix, member)
  terminal_count, terminal_bytes_known = nil, nil
end

-- Doorbell rings, per doorbell list in order of first use, rung once at the end of the call
-- with one ring per queued task (ring_doorbell): a batch of creations for one entrypoint costs
-- one LPUSH, and wakes as many blocked workers as tasks it queued.
local rings, ring_order = {}, {}

-- Evicts the owner's oldest terminal task (a missing record counts: it expired); false when
-- every indexed task of the owner is live.
local function evict_owner_oldest(owner_index, owner)
  local from = 0
  while true do
    local ids = redis.call('ZRANGE', owner_index, from, from + 63)
    if #ids == 0 then return false end
    for _, id in ipairs(ids) do
      local status = redis.call('HGET', prefix .. ':task:' .. id, 'st')
      if status ~= 'running' then
        evict_and_forget(owner .. ':' .. id)
        -- Not in `terminal` (never finished: an expired record of an older layout).
        redis.call('ZREM', owner_index, id)
        return true
      end
    end
    from = from + #ids
  end
end

-- Whether the address may hold one more live task. At the bound, ids no longer in `live` are
-- dropped first: that is how finished tasks leave the set (finish_task.lua leaves it alone,
-- since its callers cannot name it), so the set never holds more than the bound.
local function address_has_room(src_live)
  if redis.call('ZCARD', src_live) < max_address_live then return true end
  for _, id in ipairs(redis.call('ZRANGE', src_live, 0, -1)) do
    if redis.call('SISMEMBER', live, id) == 0 then
      redis.call('ZREM', src_live, id)
    end
  end
  return redis.call('ZCARD', src_live) < max_address_live
end

local function due_count()
  return redis.call('ZCOUNT', admissions, '-inf', now_s)
    + redis.call('ZCOUNT', leases, '-inf', now_s)
end

-- Only this call changes `live` meanwhile (a script runs alone), one SADD per created task.
local live_count = redis.call('SCARD', live)

for i = 0, (#KEYS - 7) / 6 - 1 do
  local kb, ab = 8 + i * 6, 8 + i * 12
  local task, owner_index = KEYS[kb], KEYS[kb + 1]
  local owner_live, queue, wake = KEYS[kb + 2], KEYS[kb + 3], KEYS[kb + 4]
  local src_live = KEYS[kb + 5]
  local id, owner, context, invocation = ARGV[ab], ARGV[ab + 1], ARGV[ab + 2], ARGV[ab + 3]
  local entrypoint, mode, retention = ARGV[ab + 4], ARGV[ab + 5], ARGV[ab + 8]
  local counted = max_address_live > 0 and ARGV[ab + 9] ~= ''
  local private = ARGV[ab + 11] == '1'

  local refused = nil
  if redis.call('EXISTS', task) == 1 then
    refused = {0, 'DUPLICATE'}
  elseif live_count >= max_tasks then
    refused = {0, 'CAPACITY', due_count()}
  elseif max_owner_live > 0 and not private
      and tonumber(redis.call('GET', owner_live) or '0') >= max_owner_live then
    refused = {0, 'OWNER_LIVE'}
  elseif counted and not address_has_room(src_live) then
    refused = {0, 'ADDRESS_LIVE'}
  end
  if not refused and max_owner_retained > 0 and not private then
    while redis.call('ZCARD', owner_index) >= max_owner_retained do
      if not evict_owner_oldest(owner_index, owner) then
        refused = {0, 'OWNER_RETAINED'}
        break
      end
    end
  end
  if not refused and max_retained > 0 then
    while live_count + retained_count() >= max_retained do
      local oldest = redis.call('ZRANGE', terminal, 0, 0)
      if #oldest == 0 then
        refused = {0, 'CAPACITY', due_count()}
        break
      end
      evict_and_forget(oldest[1])
    end
  end
  if not refused and max_retained_bytes > 0 then
    while retained_bytes_now() > max_retained_bytes do
      local oldest = redis.call('ZRANGE', terminal, 0, 0)
      if #oldest == 0 then break end
      evict_and_forget(oldest[1])
    end
  end

  if refused then
    out[#out + 1] = refused
  else
    local phase, handed_off = 'queued', '1'
    if mode == 'reserved' then phase, handed_off = 'reserved', '0' end
    -- One HSET: the record, its optional fields and seq 1 (the event below). The fields every
    -- take and finish names come first: a listpack record is scanned from its start for each
    -- field a command names, and the invocation, the largest, is never read after the take.
    local set = {'st', 'running', 'ph', phase, 'ls', ':::0', 'ow', owner, 'sq', '1',
      'at', '0', 'up', now_s, 'cr', now_s, 'ma', ARGV[ab + 7], 'en', entrypoint,
      'ho', handed_off, 'iv', invocation}
    if context ~= '' then
      set[#set + 1] = 'cx'
      set[#set + 1] = context
    end
    if retention ~= '' then
      set[#set + 1] = 'rt'
      set[#set + 1] = retention
    end
    if ARGV[ab + 9] ~= '' then
      set[#set + 1] = 'pa'
      set[#set + 1] = ARGV[ab + 9]
    end
    if ARGV[ab + 10] ~= '' then
      set[#set + 1] = 'nc'
      set[#set + 1] = ARGV[ab + 10]
    end
    local expires = nil
    if mode == 'reserved' then
      expires = now + tonumber(ARGV[ab + 6])
      set[#set + 1] = 'ax'
      set[#set + 1] = num_str(expires)
    end
    redis.call('HSET', task, unpack(set))
    live_count = live_count + redis.call('SADD', live, id)
    -- A private owner's index would hold this task alone, and nobody could read it.
    if not private then redis.call('ZADD', owner_index, now_s, id) end
    if redis.call('INCR', owner_live) == 1 and not private then
      -- The owner's first live task: its index must outlive every task from now on.
      redis.call('PERSIST', owner_index)
    end
    if counted then
      redis.call('ZADD', src_live, now_s, id)
      redis.call('PEXPIRE', src_live, num_str(SOURCE_TTL_MS))
    end
    if expires then
      redis.call('ZADD', admissions, num_str(expires), id)
    else
      redis.call('ZADD', queue, now_s, id)
      if not rings[wake] then
        rings[wake] = 0
        ring_order[#ring_order + 1] = wake
      end
      rings[wake] = rings[wake] + 1
    end
    out[#out + 1] = {1, now}
  end
end
for _, wake in ipairs(ring_order) do ring_doorbell(wake, rings[wake]) end
return out
