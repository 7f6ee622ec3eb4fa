-- take_queued(leases, queues, claimer, ttl, max, run_ms, now): pops up to max queued tasks,
-- each queue's oldest first, and claims each (run_ms nil: the claim is left prepared, as
-- take_next wants; otherwise it is activated in the same step, as take_active wants: queued
-- tasks were handed off, so nothing stands between the two).
-- The pop is the claim: no worker names candidates, so two workers can never race for one queue
-- head, and each task taken costs one popped entry, one HMGET and one HSET (the lease
-- deadlines of a take enter the lease index in one ZADD, with its pin: lease_index.lua). An
-- entry whose task is no longer queued (it cannot normally exist: every transition out of
-- `queued` removes it) is dropped and the next one taken instead.
-- With several queues one ZMPOP pops from the first that holds tasks, in an order that starts
-- at a queue chosen by the clock's millisecond, so that no entrypoint always waits behind a
-- busy one: FIFO within each entrypoint, turns between them. (Merging the queues' heads
-- oldest first cost one read per queue on every take, most of them of empty queues.)
-- Task keys are not declared in KEYS: they are named from the shard's hash tag (the prefix of
-- `leases`), so they lie in the same slot as every declared key, as BullMQ's scripts do with
-- job keys. Queues hold their tasks in a sorted set by enqueue time (rather than a list) so that
-- a queued task that is cancelled leaves its queue in O(log N) (finish_task.lua).
-- Returns a flat list, 9 values per claim (+2 when activated):
--   id, epoch, lease_expires, owner, invocation, attempt before, max_attempts, entrypoint,
--   created [, attempt, run_deadline]
-- and whether any of the queues still holds a task (1 | 0).
-- @include "variadic"
-- @include "num_str"
-- @include "lease_index"
-- @include "lease_field"
local function take_queued(leases, queues, claimer, ttl, max, run_ms, now)
  if #queues == 0 then return {}, 0 end
  if max <= 0 then
    if redis.call('EXISTS', unpack(queues)) == 0 then return {}, 0 end
    return {}, 1
  end
  local prefix = string.sub(leases, 1, -7) .. 'task:'
  -- ZMPOP numkeys key.. MIN COUNT n, the keys from a rotating first one.
  local pop, first = {num_str(#queues)}, now % #queues
  for q = 1, #queues do pop[q + 1] = queues[(first + q - 1) % #queues + 1] end
  pop[#pop + 1] = 'MIN'
  pop[#pop + 1] = 'COUNT'
  local count_at = #pop + 1
  local out, claimed, drained, deadlines = {}, 0, false, {}
  -- Every claim of the call shares its lease deadline and run deadline (num_str.lua).
  local expires = now + ttl
  local expires_s = num_str(expires)
  local run_deadline, lease
  if run_ms then
    run_deadline = now + run_ms
    lease = lease_pack(expires_s, num_str(run_deadline), num_str(run_ms), '')
  else
    lease = lease_pack(expires_s, '', '', '')
  end
  while claimed < max do
    -- Up to the number still wanted, from the first queue in `pop`'s order that holds any; an
    -- empty reply (false) says every queue is empty.
    local want, popped = max - claimed, {}
    pop[count_at] = num_str(want)
    local got = redis.call('ZMPOP', unpack(pop))
    if got then
      for _, entry in ipairs(got[2]) do popped[#popped + 1] = entry[1] end
    end
    if #popped == 0 then
      drained = true
      break
    end
    for _, id in ipairs(popped) do
      local task = prefix .. id
      local f = redis.call('HMGET', task, 'st', 'ph', 'ow', 'iv', 'at', 'ma', 'en', 'cr', 'ls')
      if f[1] == 'running' and f[2] == 'queued' then
        local _, _, _, held_epoch = lease_unpack(f[9])
        local epoch = tonumber(held_epoch or '0') + 1
        local before = tonumber(f[5] or '0')
        if run_ms then
          redis.call('HSET', task, 'ph', 'active', 'lo', claimer,
            'ls', lease .. num_str(epoch), 'at', num_str(before + 1))
        else
          redis.call('HSET', task, 'ph', 'prepared', 'lo', claimer, 'ls', lease .. num_str(epoch))
        end
        deadlines[#deadlines + 1] = expires_s
        deadlines[#deadlines + 1] = id
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
          out[n + 11] = run_deadline
        end
      end
    end
  end
  if #deadlines > 0 then
    pin_lease_index(deadlines)
    variadic('ZADD', leases, deadlines, 2)
  end
  local more = 0
  if not drained and redis.call('EXISTS', unpack(queues)) > 0 then more = 1 end
  return out, more
end
