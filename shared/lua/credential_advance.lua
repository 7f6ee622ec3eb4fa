-- credential_advance: moves a held credential on (`claimed -> settling` before the facilitator
-- is asked to settle, `settling -> settled` with the receipt after), keeping its TTL.
--
-- KEYS[1] the record
-- ARGV[1] holder id  ARGV[2] expected state  ARGV[3] next state  ARGV[4] receipt ('' for none)
-- Returns 1 when moved, 0 when the record is not this holder's or not in the expected state.

local record = KEYS[1]
local holder, expected, next_state, receipt = ARGV[1], ARGV[2], ARGV[3], ARGV[4]

local f = redis.call('HMGET', record, 'holder', 'state')
if f[1] ~= holder or f[2] ~= expected then
  return 0
end
redis.call('HSET', record, 'state', next_state)
if receipt ~= '' then
  redis.call('HSET', record, 'receipt', receipt)
end
return 1
