-- credential_release: gives a claimed credential back (verification refused it or failed before
-- anything was settled), so the payer may retry it. A credential sent to settlement is never
-- released.
--
-- KEYS[1] the record
-- ARGV[1] holder id
-- Returns 1 when released, 0 when not held by this holder in state `claimed`.

local record = KEYS[1]
local holder = ARGV[1]

local f = redis.call('HMGET', record, 'holder', 'state')
if f[1] ~= holder or f[2] ~= 'claimed' then
  return 0
end
redis.call('DEL', record)
return 1
