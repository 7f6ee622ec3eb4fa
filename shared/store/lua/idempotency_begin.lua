-- idempotency_begin: claims the idempotency record of one (scope, key) for a request, or says
-- why it cannot run. A new record is `running`, owned by the claimer, and expires after the
-- in-progress TTL, so a claim whose gateway died lapses by itself. A fingerprint other than
-- the record's is a conflict whatever the record's state; a finished record is replayed.
-- Expiry is relative (PEXPIRE on the Redis clock), so no client time is involved.
--
-- The namespace holds at most ARGV[5] records (upstream `maxEntries`), counted in two sorted
-- sets of record ids scored by expiry (microseconds, Redis clock): one of running records, one of done
-- ones. Expired ids are pruned first. At the bound a new record is not written: the script
-- names the oldest done record for the caller to evict (idempotency_evict.lua, which declares
-- that record's key) before it begins again; a running record is never evicted (its request
-- would run twice), so when every record is running the answer is 'full'.
--
-- KEYS[1] the record (hash: fp, state running|done, owner, status, headers, body, kept)
-- KEYS[2] running ids (zset)  KEYS[3] done ids (zset)
-- ARGV[1] request fingerprint  ARGV[2] claim owner id  ARGV[3] in-progress TTL ms (>= 1)
-- ARGV[4] the record's id (its key without the prefix)  ARGV[5] max records (>= 1)
-- Returns {'started'} | {'in_progress'} | {'conflict'}
--   | {'replay', status, headers json, body} | {'not_kept', status}
--   | {'evict', oldest done id} | {'full'}

-- @include "idempotency_index"

local record, running, done = KEYS[1], KEYS[2], KEYS[3]
local fingerprint, owner, ttl, id = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local max = tonumber(ARGV[5])

local f = redis.call('HMGET', record, 'fp', 'state', 'status', 'headers', 'body', 'kept')
if f[1] then
  if f[1] ~= fingerprint then
    return {'conflict'}
  end
  if f[2] == 'done' then
    if f[6] == '0' then
      return {'not_kept', f[3] or ''}
    end
    return {'replay', f[3] or '', f[4] or '[]', f[5] or ''}
  end
  return {'in_progress'}
end

-- A record without a fingerprint cannot be judged; start afresh.
redis.call('DEL', record)
local now = now_us()
redis.call('ZREMRANGEBYSCORE', running, '-inf', int(now))
redis.call('ZREMRANGEBYSCORE', done, '-inf', int(now))
redis.call('ZREM', running, id)
redis.call('ZREM', done, id)
expire_index(running)
expire_index(done)
if redis.call('ZCARD', running) + redis.call('ZCARD', done) >= max then
  local oldest = redis.call('ZRANGE', done, 0, 0)
  if oldest[1] then
    return {'evict', oldest[1]}
  end
  return {'full'}
end

redis.call('HSET', record, 'fp', fingerprint, 'state', 'running', 'owner', owner)
redis.call('PEXPIRE', record, ttl)
redis.call('ZADD', running, int(now + tonumber(ttl) * 1000), id)
expire_index(running)
return {'started'}
