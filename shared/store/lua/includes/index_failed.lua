-- index_failed(key, id, now, retention_ms): enters a task that just failed in its entrypoint's
-- failed index of this shard (`Keys::failed`: a sorted set of task ids scored by when they
-- failed), the operator's dead-letter view (`TaskStore::failed_page`). Bounded: only the
-- FAILED_KEPT newest ids stay, and none older than the retention (its record is gone by then);
-- the set expires a retention after its latest failure, so an entrypoint that stops failing
-- leaves nothing. An id whose record expired earlier (a shorter retention) is dropped by the
-- reader that finds it gone.
-- @include "num_str"
local FAILED_KEPT = 1000
local function index_failed(key, id, now, retention_ms)
  redis.call('ZADD', key, num_str(now), id)
  redis.call('ZREMRANGEBYRANK', key, '0', num_str(-(FAILED_KEPT + 1)))
  redis.call('ZREMRANGEBYSCORE', key, '-inf', '(' .. num_str(now - retention_ms))
  if redis.call('PTTL', key) < retention_ms then
    redis.call('PEXPIRE', key, num_str(retention_ms + 1000))
  end
end
