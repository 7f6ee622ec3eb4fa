-- credential_advance: moves a held credential on, keeping its TTL:
--   claimed  -> settling   before the facilitator is asked to settle; stores the facilitator
--                          request and indexes the record, so a lost settle answer can be
--                          looked up later (the gateway's settlement recovery)
--   settling -> settled    with the receipt, or -> void when the facilitator never settled it;
--                          leaves the index
--
-- KEYS[1] the record  KEYS[2] the index of records in `settling` (sorted by since when)
-- ARGV[1] holder id  ARGV[2] expected state  ARGV[3] next state
-- ARGV[4] data: the request (to `settling`) or the receipt (to `settled`); '' for none
-- Returns 1 when moved, 0 when the record is not this holder's or not in the expected state.

-- @include "now_ms"

local record, index = KEYS[1], KEYS[2]
local holder, expected, next_state, data = ARGV[1], ARGV[2], ARGV[3], ARGV[4]

local f = redis.call('HMGET', record, 'holder', 'state')
if f[1] ~= holder or f[2] ~= expected then
  return 0
end
redis.call('HSET', record, 'state', next_state)
if next_state == 'settling' then
  if data ~= '' then redis.call('HSET', record, 'request', data) end
  redis.call('ZADD', index, now_ms(), record)
elseif data ~= '' then
  redis.call('HSET', record, 'receipt', data)
end
if expected == 'settling' then
  redis.call('ZREM', index, record)
end
return 1
