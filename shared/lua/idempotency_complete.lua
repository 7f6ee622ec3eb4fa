-- idempotency_complete: stores the response of a claimed request for replay, if the claim is
-- still the record's (not lapsed, not released, not taken over by a retry after lapsing).
-- The record is then kept for the retention, and expires by itself.
--
-- KEYS[1] the record (hash: fp, state running|done, owner, status, headers, body)
-- ARGV[1] claim owner id  ARGV[2] fingerprint  ARGV[3] status  ARGV[4] headers json
-- ARGV[5] body  ARGV[6] retention ms (>= 1)
-- Returns 1 when recorded, 0 when the claim is no longer current.

local record = KEYS[1]
local owner, fingerprint = ARGV[1], ARGV[2]

local f = redis.call('HMGET', record, 'state', 'owner', 'fp')
if f[1] ~= 'running' or f[2] ~= owner or f[3] ~= fingerprint then
  return 0
end
redis.call('HSET', record, 'state', 'done', 'status', ARGV[3], 'headers', ARGV[4],
  'body', ARGV[5])
redis.call('HDEL', record, 'owner')
redis.call('PEXPIRE', record, ARGV[6])
return 1
