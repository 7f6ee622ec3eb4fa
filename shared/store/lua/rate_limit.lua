-- rate_limit: fair admission, GCRA (generic cell rate algorithm) over one or more subjects
-- (a client address, an owner), all checked together: a request is admitted only when every
-- subject has room, and only then is each subject charged. The clock is Redis TIME, so every
-- gateway shares it; each key holds its subject's theoretical arrival time (TAT, in
-- microseconds) and expires (its SET carries PX) when the subject's quota is whole again.
--
-- KEYS[i]  the subject's key ({ns}:rate:<kind>:<subject>)
-- ARGV[2i-1] emission interval in microseconds (1e6 / rate)   ARGV[2i] burst (requests)
-- Returns {0} when admitted, else {i, retry_after_us}: the first subject over its limit and
-- the microseconds until it admits one more request.

local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000000 + tonumber(time[2])

local tats = {}
for i = 1, #KEYS do
  local interval = tonumber(ARGV[2 * i - 1])
  local burst = tonumber(ARGV[2 * i])
  local tat = tonumber(redis.call('GET', KEYS[i])) or now
  if tat < now then
    tat = now
  end
  -- Admitted while the TAT is at most (burst - 1) intervals ahead of now.
  local allow_at = tat - interval * (burst - 1)
  if now < allow_at then
    return {i, allow_at - now}
  end
  tats[i] = tat + interval
end
for i = 1, #KEYS do
  -- One SET with its expiry (PX), not SET and PEXPIRE: a call a script makes costs about
  -- as much again as the command it runs (docs/performance.md, "Fewer calls per task").
  redis.call('SET', KEYS[i], string.format('%d', tats[i]), 'PX',
    string.format('%d', math.max(1, math.ceil((tats[i] - now) / 1000))))
end
return {0}
