-- The deadlines of a task's lease, in one record field, `ls` (redis/fields.rs LEASE):
--   '<lease deadline>:<run deadline>:<run limit>'
-- in ms (deadlines on the Redis clock, num_str's decimal integers), the run's two empty while
-- the claim is only prepared; the holder stays in its own field, `lo`.
-- Why one field and not three (as layout 2 had them, `lx`, `rd`, `rm`): a small record is one
-- listpack, and each field name a script reads, writes or deletes costs a scan of it; a take
-- wrote these three and the finish deleted them (docs/performance.md, "The lease in one
-- field"). Why the holder is not in it too: a value over hash-max-listpack-value (64 bytes)
-- turns the whole record into a hash table for good, several times its memory once retained,
-- and the three numbers take up to 35 bytes, while a worker id is its host name and more
-- (tests/tests/store/redis_footprint.rs runs a task under a long holder id).

-- lease_pack(expires_s, run_deadline_s, run_ms_s): the field's value ('' for the run's two
-- while the claim is prepared).
local function lease_pack(expires_s, run_deadline_s, run_ms_s)
  return expires_s .. ':' .. run_deadline_s .. ':' .. run_ms_s
end

-- lease_unpack(ls): the lease deadline (a number), the run deadline and the run limit
-- (strings, '' while prepared); nothing when the field is absent (false, as HMGET gives it) or
-- unreadable.
local function lease_unpack(ls)
  if not ls then return nil end
  local expires, run_deadline, run_ms = string.match(ls, '^(%d+):(%d*):(%d*)$')
  if not expires then return nil end
  return tonumber(expires), run_deadline, run_ms
end

-- lease_renewed(ls, expires_s): the same lease with the deadline expires_s, the rest as it was
-- (ls as lease_unpack read it).
local function lease_renewed(ls, expires_s)
  return expires_s .. string.sub(ls, (string.find(ls, ':', 1, true)))
end
