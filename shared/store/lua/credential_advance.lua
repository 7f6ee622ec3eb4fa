-- credential_advance: moves a held credential on, keeping its TTL:
--   claimed  -> settling   before the facilitator is asked to settle; stores the facilitator
--                          request and indexes the record, so a lost settle answer can be
--                          looked up later (the gateway's settlement recovery)
--   claimed  -> reserved   a payment verified and held for a run that settles only after it
--                          succeeds (settle=after); stores the request and indexes the record
--                          at the time it falls due (ARGV[5] from now): a run that nobody
--                          settled by then is released by the recovery sweep
--   reserved -> settling   the run succeeded: about to settle (re-indexed as settling, now)
--   reserved -> void       the run failed, or was abandoned: nothing is charged
--   settling -> settled    with the receipt, or -> void when the facilitator never settled it;
--                          leaves the index
--
-- KEYS[1] the record  KEYS[2] the index of records in `settling` or `reserved` (by score:
--                     since when settling, when due for reserved)
-- ARGV[1] holder id  ARGV[2] expected state  ARGV[3] next state
-- ARGV[4] data: the request (to `settling`/`reserved`), the receipt (to `settled`) or a note
--         (to `void`); '' for none
-- ARGV[5] milliseconds from now a `reserved` record falls due ('0' otherwise)
-- Returns 1 when moved, 0 when the record is not this holder's or not in the expected state.

-- @include "now_ms"

local record, index = KEYS[1], KEYS[2]
local holder, expected, next_state, data = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local due_in = tonumber(ARGV[5]) or 0

local f = redis.call('HMGET', record, 'holder', 'state')
if f[1] ~= holder or f[2] ~= expected then
  return 0
end
redis.call('HSET', record, 'state', next_state)
-- Out of the index first: a record re-indexed below (reserved -> settling) gets its new score.
if expected == 'settling' or expected == 'reserved' then
  redis.call('ZREM', index, record)
end
if next_state == 'settling' or next_state == 'reserved' then
  if data ~= '' then redis.call('HSET', record, 'request', data) end
  local score = now_ms()
  if next_state == 'reserved' then score = score + due_in end
  redis.call('ZADD', index, score, record)
elseif data ~= '' then
  redis.call('HSET', record, 'receipt', data)
end
return 1
