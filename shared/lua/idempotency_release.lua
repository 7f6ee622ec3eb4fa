-- idempotency_release: drops a claimed, unfinished record so that a retry of the same request
-- runs (after a 5xx or a timeout). Only the current claim may release it.
--
-- KEYS[1] the record (hash: fp, state running|done, owner, status, headers, body)
-- ARGV[1] claim owner id  ARGV[2] fingerprint
-- Returns 1 when released, 0 when the claim is no longer current.

local record = KEYS[1]
local owner, fingerprint = ARGV[1], ARGV[2]

local f = redis.call('HMGET', record, 'state', 'owner', 'fp')
if f[1] ~= 'running' or f[2] ~= owner or f[3] ~= fingerprint then
  return 0
end
redis.call('DEL', record)
return 1
