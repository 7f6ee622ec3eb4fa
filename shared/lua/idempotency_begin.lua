-- idempotency_begin: claims the idempotency record of one (scope, key) for a request, or says
-- why it cannot run. A new record is `running`, owned by the claimer, and expires after the
-- in-progress TTL, so a claim whose gateway died lapses by itself. A fingerprint other than
-- the record's is a conflict whatever the record's state; a finished record is replayed.
-- Expiry is relative (PEXPIRE on the Redis clock), so no client time is involved.
--
-- KEYS[1] the record (hash: fp, state running|done, owner, status, headers, body)
-- ARGV[1] request fingerprint  ARGV[2] claim owner id  ARGV[3] in-progress TTL ms (>= 1)
-- Returns {'started'} | {'in_progress'} | {'conflict'}
--   | {'replay', status, headers json, body}

local record = KEYS[1]
local fingerprint, owner, ttl = ARGV[1], ARGV[2], ARGV[3]

local f = redis.call('HMGET', record, 'fp', 'state', 'status', 'headers', 'body')
if not f[1] then
  -- A record without a fingerprint cannot be judged; start afresh.
  redis.call('DEL', record)
  redis.call('HSET', record, 'fp', fingerprint, 'state', 'running', 'owner', owner)
  redis.call('PEXPIRE', record, ttl)
  return {'started'}
end
if f[1] ~= fingerprint then
  return {'conflict'}
end
if f[2] == 'done' then
  return {'replay', f[3] or '', f[4] or '[]', f[5] or ''}
end
return {'in_progress'}
