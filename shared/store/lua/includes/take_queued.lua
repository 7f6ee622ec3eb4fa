-- take_queued(leases, queues, tasks, picks, claimer, ttl, max, run_ms, now): claims up to max
-- of the candidate tasks still queued, oldest first. queues: queue keys; picks[i] = {queue
-- index, task id} of candidate i, whose task key is tasks[i]. A candidate another worker took
-- meanwhile is skipped; a queue entry whose task is no longer queued is dropped.
-- run_ms nil: the claims are left prepared (take_next). Otherwise each claim is activated in the
-- same step (take_active): queued tasks were handed off, so nothing stands between the two.
-- One HMGET and one HSET per claimed task (epoch and attempt are counted from the read).
-- Returns a flat list, 9 values per claim (+2 when activated):
--   id, epoch, lease_expires, owner, invocation, attempt before, max_attempts, entrypoint,
--   created [, attempt, run_deadline]
local function take_queued(leases, queues, tasks, picks, claimer, ttl, max, run_ms, now)
  local out, claimed = {}, 0
  for i = 1, #picks do
    if claimed >= max then break end
    local queue, id, task = queues[picks[i][1]], picks[i][2], tasks[i]
    local f = redis.call('HMGET', task, 'st', 'ph', 'ow', 'iv', 'at',
      'ma', 'en', 'cr', 'ec')
    if f[1] == 'running' and f[2] == 'queued' then
      local epoch = tonumber(f[9] or '0') + 1
      local before = tonumber(f[5] or '0')
      local expires = now + ttl
      if run_ms then
        local deadline = now + run_ms
        redis.call('HSET', task, 'ph', 'active', 'ec', epoch, 'lo', claimer,
          'lx', expires, 'at', before + 1, 'rd', deadline,
          'rm', run_ms)
      else
        redis.call('HSET', task, 'ph', 'prepared', 'ec', epoch, 'lo', claimer,
          'lx', expires)
      end
      redis.call('ZADD', leases, expires, id)
      redis.call('ZREM', queue, id)
      claimed = claimed + 1
      local n = #out
      out[n + 1] = id
      out[n + 2] = epoch
      out[n + 3] = expires
      out[n + 4] = f[3]
      out[n + 5] = f[4]
      out[n + 6] = before
      out[n + 7] = tonumber(f[6])
      out[n + 8] = f[7]
      out[n + 9] = tonumber(f[8])
      if run_ms then
        out[n + 10] = before + 1
        out[n + 11] = now + run_ms
      end
    elseif f[2] ~= 'queued' then
      redis.call('ZREM', queue, id)
    end
  end
  return out
end
