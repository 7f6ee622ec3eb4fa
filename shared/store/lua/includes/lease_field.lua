-- The lease of a task that holds one, in one record field, `ls` (redis/fields.rs LEASE):
--   '<lease deadline>:<run deadline>:<run limit>:<holder id>'
-- deadlines in ms (Redis clock), the run's two empty while the claim is only prepared.
-- Why one field and not four (holder, deadline, run deadline, run limit, as layout 2 had them):
-- a small record is one listpack, and each field name a script reads, writes or deletes costs
-- a scan of it, absent or present; a drained task named these four 11 times (the take's write,
-- the finish's fenced read and its delete), about a tenth of its record work
-- (docs/performance.md, "The lease in one field"). The holder goes last, so any id fits,
-- colons and all; the numbers are num_str's decimal integers.

-- lease_pack(expires_s, run_deadline_s, run_ms_s, holder): the field's value ('' for the run's
-- two while the claim is prepared).
local function lease_pack(expires_s, run_deadline_s, run_ms_s, holder)
  return expires_s .. ':' .. run_deadline_s .. ':' .. run_ms_s .. ':' .. holder
end

-- lease_unpack(ls): the lease deadline (a number), the holder id, the run deadline and the
-- run limit (strings, '' while prepared); nothing when the field is absent (false, as HMGET
-- gives it) or unreadable.
local function lease_unpack(ls)
  if not ls then return nil end
  local expires, run_deadline, run_ms, holder = string.match(ls, '^(%d+):(%d*):(%d*):(.*)$')
  if not expires then return nil end
  return tonumber(expires), holder, run_deadline, run_ms
end

-- lease_renewed(ls, expires_s): the same lease with the deadline expires_s, the rest as it was.
local function lease_renewed(ls, expires_s)
  return expires_s .. string.sub(ls, (string.find(ls, ':', 1, true)))
end
