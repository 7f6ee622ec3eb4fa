-- idempotency_begin: claims the idempotency record of one (scope, key) for a request, or says
-- why it cannot run. A new record is `running`, owned by the claimer, and expires after the
-- in-progress TTL, so a claim whose gateway died lapses by itself. A fingerprint other than
-- the record's is a conflict whatever the record's state; a finished record is replayed.
-- Expiry is relative (PEXPIRE on the Redis clock), so no client time is involved.
--
-- Records are never evicted: a record another caller could push out would let that caller
-- make a victim's retry run (and be charged) twice. Instead each record is charged to its
-- subjects (the payer, the token's owner, the client address: KEYS[4..], one sorted set of
-- record ids per subject), and a subject holding ARGV[6] records is refused ('quota', with
-- the ms until its oldest record lapses). The namespace as a whole holds at most ARGV[5]
-- records (two sorted sets, running and done): past that every newcomer is refused ('full').
-- Every set scores its ids by expiry (microseconds, Redis clock) and is pruned first.
--
-- KEYS[1] the record (hash: fp, state running|done, owner, status, headers, body, kept)
-- KEYS[2] running ids (zset)  KEYS[3] done ids (zset)  KEYS[4..] the subjects' ids (zsets)
-- ARGV[1] request fingerprint  ARGV[2] claim owner id  ARGV[3] in-progress TTL ms (>= 1)
-- ARGV[4] the record's id (its key without the prefix)  ARGV[5] max records (>= 1)
-- ARGV[6] max records per subject (>= 1)
-- Returns {'started'} | {'in_progress'} | {'conflict'}
--   | {'replay', status, headers json, body} | {'not_kept', status}
--   | {'quota', ms until the subject's oldest record lapses} | {'full'}

-- @include "idempotency_index"

local record, running, done = KEYS[1], KEYS[2], KEYS[3]
local fingerprint, owner, ttl, id = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local max, per_subject = tonumber(ARGV[5]), tonumber(ARGV[6])

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
for i = 2, #KEYS do
  redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', int(now))
  redis.call('ZREM', KEYS[i], id)
  expire_index(KEYS[i])
end
for i = 4, #KEYS do
  if redis.call('ZCARD', KEYS[i]) >= per_subject then
    local oldest = redis.call('ZRANGE', KEYS[i], 0, 0, 'WITHSCORES')
    return {'quota', int(math.ceil((tonumber(oldest[2]) - now) / 1000))}
  end
end
if redis.call('ZCARD', running) + redis.call('ZCARD', done) >= max then
  return {'full'}
end

redis.call('HSET', record, 'fp', fingerprint, 'state', 'running', 'owner', owner)
redis.call('PEXPIRE', record, ttl)
local expires = int(now + tonumber(ttl) * 1000)
redis.call('ZADD', running, expires, id)
expire_index(running)
for i = 4, #KEYS do
  redis.call('ZADD', KEYS[i], expires, id)
  expire_index(KEYS[i])
end
return {'started'}
