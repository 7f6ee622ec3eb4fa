-- reporter_hold: takes the cluster's reporter lease when nobody holds it, or renews it when the
-- caller does. One process reports the cluster gauges (queue depth, leases, workers, capacity,
-- store memory) at a time: the lease's holder. A holder that stops renewing (killed, cut off)
-- loses it ttl after its last renewal, and the next caller takes it.
--
-- KEYS[1] the reporter lease (string: the holder's id, expiring)
-- ARGV[1] the caller's id  ARGV[2] ttl ms (>= 1)
-- Returns 1 when the caller holds the lease afterwards (taken or renewed), else 0.

local lease, holder, ttl = KEYS[1], ARGV[1], ARGV[2]
if redis.call('SET', lease, holder, 'NX', 'PX', ttl) then
  return 1
end
if redis.call('GET', lease) == holder then
  redis.call('PEXPIRE', lease, ttl)
  return 1
end
return 0
