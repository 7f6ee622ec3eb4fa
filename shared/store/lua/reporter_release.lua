-- reporter_release: gives the reporter lease up on a clean shutdown (compare and delete), so the
-- next caller of reporter_hold takes it at once instead of after its ttl. A lease someone else
-- took meanwhile (this caller's expired) is left alone.
--
-- KEYS[1] the reporter lease (string: the holder's id, expiring)
-- ARGV[1] the caller's id
-- Returns 1 when the caller held the lease (now deleted), else 0.

local lease, holder = KEYS[1], ARGV[1]
if redis.call('GET', lease) == holder then
  redis.call('DEL', lease)
  return 1
end
return 0
