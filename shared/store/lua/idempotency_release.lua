-- idempotency_release: drops a claimed, unfinished record so that a retry of the same request
-- runs (after a 5xx or a timeout), and its id from the running index and its subjects' sets
-- (it no longer counts against their quotas). Only the current claim may release it.
--
-- KEYS[1] the record (hash: fp, state running|done, owner, status, headers, body, kept)
-- KEYS[2] running ids (zset)  KEYS[3..] the subjects' ids (zsets)
-- ARGV[1] claim owner id  ARGV[2] fingerprint  ARGV[3] the record's id
-- Returns 1 when released, 0 when the claim is no longer current.

-- @include "idempotency_index"

local record, running = KEYS[1], KEYS[2]
local owner, fingerprint = ARGV[1], ARGV[2]

local f = redis.call('HMGET', record, 'state', 'owner', 'fp')
if f[1] ~= 'running' or f[2] ~= owner or f[3] ~= fingerprint then
  return 0
end
redis.call('DEL', record)
for i = 2, #KEYS do
  redis.call('ZREM', KEYS[i], ARGV[3])
  expire_index(KEYS[i])
end
return 1
