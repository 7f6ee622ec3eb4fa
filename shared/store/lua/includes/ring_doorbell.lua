-- ring_doorbell(wake_key): wakes one worker blocked on the entrypoint's doorbell list. The list
-- is capped (it keeps 32 to 64 rings; rings beyond wake nobody new) and expires when nobody
-- listens, so an entrypoint without workers leaves no key behind. LPUSH answers the list's
-- length: a list it created (1) gets its expiry, one past the cap is trimmed to half of it (so
-- that a full list, which busy workers leave unread, is trimmed once per 32 rings, not on
-- each); any other keeps the expiry it got when it was created (BLPOP deletes a list it
-- empties), so most rings cost one command.
local function ring_doorbell(wake_key)
  local length = redis.call('LPUSH', wake_key, '1')
  if length == 1 then
    redis.call('PEXPIRE', wake_key, '60000')
  elseif length > 64 then
    redis.call('LTRIM', wake_key, '0', '31')
  end
end
