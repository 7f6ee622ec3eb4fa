-- A task's fence epoch and the deadlines of its lease, in one record field, `ls`
-- (redis/fields.rs LEASE):
--   '<lease deadline>:<run deadline>:<run limit>:<epoch>'
-- in ms (deadlines on the Redis clock), num_str's decimal integers. The run's two are empty
-- while the claim is only prepared, all three while the task holds no lease (':::<epoch>':
-- created at 0, each claim raises it, and it outlives every lease until the task is terminal,
-- so that a claim's epoch is never given twice). The holder keeps its own field, `lo`.
-- Why one field and not four (as layout 2 had them: `lx`, `rd`, `rm`, `ec`): a small record is
-- one listpack, and each field name a script reads, writes or deletes costs a scan of it; a
-- drained task named these 11 times (the take's read and write, the fenced finish's read and
-- its delete), now 4 (docs/performance.md, "The lease in one field"). Why the holder is not in
-- it too: a value over hash-max-listpack-value (64 bytes) turns the whole record into a hash
-- table for good, several times its memory once retained; the four numbers take at most about
-- 45 bytes, while a worker id is its host name and more (tests/tests/store/redis_footprint.rs
-- runs a task under a long holder id).

-- lease_pack(expires_s, run_deadline_s, run_ms_s, epoch_s): the field's value ('' for the
-- run's two while the claim is prepared).
local function lease_pack(expires_s, run_deadline_s, run_ms_s, epoch_s)
  return expires_s .. ':' .. run_deadline_s .. ':' .. run_ms_s .. ':' .. epoch_s
end

-- lease_unpack(ls): the lease deadline (a number; nil without a lease), the run deadline and
-- the run limit (strings, '' while prepared or without a lease) and the epoch (a string, as
-- the scripts' callers pass it); nothing when the field is absent (false, as HMGET gives it:
-- a terminal task) or unreadable.
local function lease_unpack(ls)
  if not ls then return nil end
  local expires, run_deadline, run_ms, epoch = string.match(ls, '^(%d*):(%d*):(%d*):(%d+)$')
  if not epoch then return nil end
  return tonumber(expires), run_deadline, run_ms, epoch
end

-- lease_renewed(ls, expires_s): the same lease with the deadline expires_s, the rest as it was
-- (ls as lease_unpack read it, with a lease).
local function lease_renewed(ls, expires_s)
  return expires_s .. string.sub(ls, (string.find(ls, ':', 1, true)))
end

-- lease_dropped(epoch_s): the field of a task that holds no lease, its epoch kept.
local function lease_dropped(epoch_s)
  return ':::' .. epoch_s
end
