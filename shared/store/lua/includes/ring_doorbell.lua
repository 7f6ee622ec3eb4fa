-- ring_doorbell(wake_key): wakes one worker blocked on the entrypoint's doorbell list. The list
-- is capped (rings beyond 64 wake nobody new) and expires when nobody listens, so an
-- entrypoint without workers leaves no key behind.
local function ring_doorbell(wake_key)
  redis.call('LPUSH', wake_key, '1')
  redis.call('LTRIM', wake_key, 0, 63)
  redis.call('PEXPIRE', wake_key, 60000)
end
