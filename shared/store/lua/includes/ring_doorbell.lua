-- ring_doorbell(wake_key, rings): wakes up to `rings` (default 1) workers blocked on the
-- entrypoint's doorbell list, one ring per task queued, all in one LPUSH (a batch of creations
-- rings once per entrypoint: create.lua). The list is capped (it keeps 32 to 64 rings; rings
-- beyond wake nobody new) and expires when nobody listens, so an entrypoint without workers
-- leaves no key behind. LPUSH answers the list's length: a list it created (the length equals
-- the rings pushed) gets its expiry, one past the cap is trimmed to half of it (so that a full
-- list, which busy workers leave unread, is trimmed once per 32 rings, not on each); any other
-- keeps the expiry it got when it was created (BLPOP deletes a list it empties), so most rings
-- cost one command.
local DOORBELL_CAP = 64
local function ring_doorbell(wake_key, rings)
  rings = math.min(rings or 1, DOORBELL_CAP)
  local length
  if rings == 1 then
    length = redis.call('LPUSH', wake_key, '1')
  else
    local push = {}
    for i = 1, rings do push[i] = '1' end
    length = redis.call('LPUSH', wake_key, unpack(push))
  end
  if length == rings then
    redis.call('PEXPIRE', wake_key, '60000')
  elseif length > DOORBELL_CAP then
    redis.call('LTRIM', wake_key, '0', '31')
  end
end
