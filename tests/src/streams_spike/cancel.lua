-- streams spike, cancel (mode 'record'): ends a task that is queued or running, unfenced, as the
-- service's cancel does. The record says cancelled and the task leaves the live set; its entry
-- is acknowledged and deleted, which takes the lease away: the worker that holds it finds its
-- next renewal without the entry (its signal to stop) and its finish refused by the same fence
-- as a stale worker's. A queued entry deleted here is never delivered.
--
-- KEYS[1] stream  KEYS[2] the task's record  KEYS[3] live set
-- ARGV[1] group  ARGV[2] the task's entry id  ARGV[3] task id
-- Returns 1 when cancelled, 0 when the task was no longer running.

if redis.call('HGET', KEYS[2], 'st') ~= 'running' then return 0 end
redis.call('HSET', KEYS[2], 'st', 'cancelled')
redis.call('SREM', KEYS[3], ARGV[3])
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
redis.call('XDEL', KEYS[1], ARGV[2])
return 1
