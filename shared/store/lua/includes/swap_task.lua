-- @include "finish_task"
-- @include "log_event"
-- @include "index_failed"
-- @include "num_str"
-- @include "lease_field"
-- swap_task(k, a, now, retention_ms, log_len, worker_prefix, acc): one compare-and-set item (see
-- cas.lua for the values in a: id, owner, expected, next, result, error, holder, epoch, event,
-- data, channel). One HMGET (which also reads what finish_task needs), one HSET (status,
-- updated, seq, result/error), then finish_task and the event: a terminal event is only
-- published, since the terminal record rebuilds it (redis/event_log.rs); any other is logged
-- too. `acc` (finish_task's batch, nil: none) gathers the shard-wide bookkeeping of a
-- terminal write for the caller's finish_flush.
-- Returns {1 | 0, 'OK' | 'NOT_FOUND' | 'STATUS' | 'FENCED', status, context, created, updated,
--   result, error}
local function swap_task(k, a, now, retention_ms, log_len, worker_prefix, acc)
  local f = redis.call('HMGET', k.task, 'st', 'ow', 'lo', 'ls',
    'cx', 'cr', 'up', 'rs', 'er', 'ph', 'sq', 'rt', 'nc')
  local status, holder, next_status = f[1], a.holder, a.next
  if not status or f[2] ~= a.owner then
    return {0, 'NOT_FOUND'}
  end
  local reason = 'OK'
  if not string.find(a.expected, ',' .. status .. ',', 1, true)
      or (status ~= 'running' and next_status == 'running') then
    reason = 'STATUS'
  elseif holder ~= '' then
    local lease_expires, _, _, held_epoch = lease_unpack(f[4])
    if not (status == 'running' and f[3] == holder and held_epoch == a.epoch
        and lease_expires and lease_expires > now) then
      reason = 'FENCED'
    end
  end
  if reason ~= 'OK' then
    return {0, reason, status, f[5], f[6], f[7], f[8], f[9]}
  end
  local result, err = f[8], f[9]
  local seq = tonumber(f[11] or '0') + 1
  local set = {'st', next_status, 'up', num_str(now), 'sq', num_str(seq)}
  if a.result ~= '' then
    result = a.result
    set[#set + 1] = 'rs'
    set[#set + 1] = result
  end
  if a.error ~= '' then
    err = a.error
    set[#set + 1] = 'er'
    set[#set + 1] = err
  end
  redis.call('HSET', k.task, unpack(set))
  local has_push
  if next_status ~= 'running' then
    has_push = finish_task(k, a.id, f[10], retention_ms, now, {owner = f[2], retention = f[12],
      seq = f[11], sizes = #(result or '') + #(err or ''), notify = f[13], fields_known = true}, acc)
    if next_status == 'failed' then index_failed(k.failed, a.id, now, retention_ms) end
    if holder == '' and f[3] then
      redis.call('PUBLISH', worker_prefix .. f[3], a.id)
    end
  end
  if next_status ~= 'running' then
    publish_event(a.channel, seq, a.event, a.data, f[13], k.push, has_push)
  else
    log_event(k.events, a.channel, seq, a.event, a.data, log_len, f[13], k.push)
  end
  return {1, reason, next_status, f[5], f[6], now, result, err}
end
