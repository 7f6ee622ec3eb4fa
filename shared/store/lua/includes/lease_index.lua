-- pin_lease_index(args): appends the lease index's pin (a score and a member) to the arguments
-- of a ZADD that may create the index, so that the index is a skiplist from its first entry.
-- Why: Redis keeps a sorted set of at most zset-max-listpack-entries (128) members, each at
-- most zset-max-listpack-value (64) bytes, as one listpack, where every ZADD and ZREM scans the
-- whole set. The lease index holds about as many members as tasks are running (a worker's
-- concurrency), so it stays that small, and it is the hottest sorted set of the store: a ZADD
-- per take and renewal, a ZREM per finish. One member longer than 64 bytes converts it for good
-- (Redis does not convert back), and then each of those is a dictionary look-up and a skiplist
-- step: 4.5 % of Redis's instructions per drained task (docs/performance.md, "Instructions
-- per drained task"). The pin's score is +inf, so no reader of due deadlines (due.lua,
-- create.lua's ZCOUNT up to now) ever sees it, and the lease count is ZCOUNT -inf (+inf. The
-- index is therefore kept for good once a shard has run a task, like the layout stamp: one key
-- per shard (the leak checks of the conformance suite and the chaos run allow it).
local LEASE_INDEX_PIN =
  '~pin: one member over zset-max-listpack-value keeps the lease index a skiplist (lease_index.lua)'
local function pin_lease_index(args)
  args[#args + 1] = '+inf'
  args[#args + 1] = LEASE_INDEX_PIN
end
