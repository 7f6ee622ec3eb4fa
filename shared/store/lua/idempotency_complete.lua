-- idempotency_complete: stores the response of a claimed request for replay, if the claim is
-- still the record's (not lapsed, not released, not taken over by a retry after lapsing).
-- The record is then kept for the retention, and expires by itself; its id moves from the
-- running index to the done one (see idempotency_begin.lua), and its subjects' sets score it
-- by its new expiry: it counts against their quotas for its retention.
-- A body over ARGV[8] bytes is not kept: the record says so (`kept` 0) and a replay answers
-- that instead of running the request again.
--
-- KEYS[1] the record (hash: fp, state running|done, owner, status, headers, body, kept)
-- KEYS[2] running ids (zset)  KEYS[3] done ids (zset)  KEYS[4..] the subjects' ids (zsets)
-- ARGV[1] claim owner id  ARGV[2] fingerprint  ARGV[3] status  ARGV[4] headers json
-- ARGV[5] body  ARGV[6] retention ms (>= 1)  ARGV[7] the record's id  ARGV[8] max body bytes
-- Returns 1 when recorded, 0 when the claim is no longer current.

-- @include "idempotency_index"

local record, running, done = KEYS[1], KEYS[2], KEYS[3]
local owner, fingerprint, id = ARGV[1], ARGV[2], ARGV[7]

local f = redis.call('HMGET', record, 'state', 'owner', 'fp')
if f[1] ~= 'running' or f[2] ~= owner or f[3] ~= fingerprint then
  return 0
end
if string.len(ARGV[5]) > tonumber(ARGV[8]) then
  redis.call('HSET', record, 'state', 'done', 'status', ARGV[3], 'kept', '0')
else
  redis.call('HSET', record, 'state', 'done', 'status', ARGV[3], 'headers', ARGV[4],
    'body', ARGV[5])
end
redis.call('HDEL', record, 'owner')
redis.call('PEXPIRE', record, ARGV[6])
redis.call('ZREM', running, id)
-- Strictly after the newest done id, so eviction order is completion order even within one
-- microsecond (the retention is one setting for every record).
local expires = now_us() + tonumber(ARGV[6]) * 1000
local last = redis.call('ZRANGE', done, -1, -1, 'WITHSCORES')
if last[2] and tonumber(last[2]) >= expires then
  expires = tonumber(last[2]) + 1
end
redis.call('ZADD', done, int(expires), id)
expire_index(running)
expire_index(done)
for i = 4, #KEYS do
  redis.call('ZADD', KEYS[i], 'XX', int(expires), id)
  expire_index(KEYS[i])
end
return 1
