-- @include "push_outbox"
-- SHARD_KEYS, shard_keys(keys): the 6 keys every cas.lua and finish_take.lua call starts
-- with: leases, admissions, live, and the retained-task keys terminal, terminal sizes,
-- terminal bytes (`cas::shared_keys`).
local SHARD_KEYS = 6
local function shard_keys(keys)
  return {
    leases = keys[1], admissions = keys[2], live = keys[3], terminal = keys[4],
    terminal_sizes = keys[5], terminal_bytes = keys[6],
  }
end

-- ITEM_KEYS, swap_item(keys, argv, kb, ab, shard): the keys (ITEM_KEYS from kb: task, events,
-- owner_index, owner_live, queue, then the task's push keys: push_keys, then its entrypoint's
-- failed index: index_failed; with the shard's: shard_keys) and values (11 from ab) of one compare-and-set item, as swap_task takes them.
local ITEM_KEYS = 6 + PUSH_KEYS
local function swap_item(keys, argv, kb, ab, shard)
  local k = {
    task = keys[kb], events = keys[kb + 1], owner_index = keys[kb + 2],
    owner_live = keys[kb + 3], queue = keys[kb + 4], leases = shard.leases,
    admissions = shard.admissions, live = shard.live, terminal = shard.terminal,
    terminal_sizes = shard.terminal_sizes, terminal_bytes = shard.terminal_bytes,
    push = push_keys(keys, kb + 5, argv[ab]), failed = keys[kb + 5 + PUSH_KEYS],
  }
  local a = {
    id = argv[ab], owner = argv[ab + 1], expected = argv[ab + 2], next = argv[ab + 3],
    result = argv[ab + 4], error = argv[ab + 5], holder = argv[ab + 6], epoch = argv[ab + 7],
    event = argv[ab + 8], data = argv[ab + 9], channel = argv[ab + 10],
  }
  return k, a
end

-- no_push_configs(keys, kb, items): whether none of `items` compare-and-set items, their keys
-- from keys[kb] (ITEM_KEYS each), has push notification configs: one EXISTS of all their
-- configs keys instead of one per terminal write (finish_task.lua asks each only when this
-- says some have). Each EXISTS a script sends costs a whole `redis.call` (arguments in, reply
-- back), several times what the key look-up costs (docs/performance.md). Nothing in these
-- scripts creates configs, so the answer holds for the whole call.
local function no_push_configs(keys, kb, items)
  if items == 0 then return true end
  local configs = {}
  for i = 0, items - 1 do configs[i + 1] = keys[kb + i * ITEM_KEYS + 5] end
  return redis.call('EXISTS', unpack(configs)) == 0
end
