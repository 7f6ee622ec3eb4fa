-- layout: stamps a namespace with the store layout this code writes, or says which one it holds.
-- Every process runs it at connect. An unstamped namespace that already holds live work, lease
-- or admission deadlines or registered workers was written by a version from before the stamp
-- (with other task field names): it is refused, never read as if it were empty.
--
-- KEYS[1] layout  KEYS[2] live  KEYS[3] leases  KEYS[4] admissions  KEYS[5] registry
-- ARGV[1] the layout this code writes
-- Returns the namespace's layout (after stamping an empty one) | 'unstamped' (older data).

local stamped = redis.call('GET', KEYS[1])
if stamped then return stamped end
if redis.call('EXISTS', KEYS[2], KEYS[3], KEYS[4], KEYS[5]) > 0 then return 'unstamped' end
redis.call('SET', KEYS[1], ARGV[1])
return ARGV[1]
