-- @include "finish_task"
-- @include "log_event"
-- @include "index_failed"
-- @include "num_str"
-- @include "lease_field"
-- swap_task(k, a, now, retention_ms, log_len, worker_prefix, acc): one compare-and-set item (see
-- cas.lua for the values in a: id, owner, expected, next, result, error, holder, epoch, event,
-- data, channel). One HMGET (which also reads what finish_task needs; a refusal reads again for
-- its reply), one HSET (status,
-- updated, seq, result/error), then finish_task and the event: a terminal event is only
-- published, since the terminal record rebuilds it (redis/event_log.rs); any other is logged
-- too. `acc` (finish_task's batch, nil: none) gathers the shard-wide bookkeeping of a
-- terminal write for the caller's finish_flush.
-- Returns {1 | 0, 'OK' | 'NOT_FOUND' | 'STATUS' | 'FENCED', status, context, created, updated,
--   result, error}
local function swap_task(k, a, now, retention_ms, log_len, worker_prefix, acc)
  -- One HMGET, of what the decision and the write need. What the write replaces is left out
  -- when it will be replaced (the result, the error): each name a command passes costs a scan
  -- of the record, to its end for a field the record lacks, as most records lack an error
  -- (docs/performance.md, "What a command costs inside a script"); the update time is read
  -- only for a refusal's reply, below.
  local st, ow, lo, ls, cx, cr, ph, sq, rt, nc, rs, er
  if a.result ~= '' and a.error == '' then
    st, ow, lo, ls, cx, cr, ph, sq, rt, nc, er = unpack(redis.call('HMGET', k.task,
      'st', 'ow', 'lo', 'ls', 'cx', 'cr', 'ph', 'sq', 'rt', 'nc', 'er'))
  elseif a.error ~= '' and a.result == '' then
    st, ow, lo, ls, cx, cr, ph, sq, rt, nc, rs = unpack(redis.call('HMGET', k.task,
      'st', 'ow', 'lo', 'ls', 'cx', 'cr', 'ph', 'sq', 'rt', 'nc', 'rs'))
  else
    st, ow, lo, ls, cx, cr, ph, sq, rt, nc, rs, er = unpack(redis.call('HMGET', k.task,
      'st', 'ow', 'lo', 'ls', 'cx', 'cr', 'ph', 'sq', 'rt', 'nc', 'rs', 'er'))
  end
  local status, holder, next_status = st, a.holder, a.next
  if not status or ow ~= a.owner then
    return {0, 'NOT_FOUND'}
  end
  local reason = 'OK'
  if not string.find(a.expected, ',' .. status .. ',', 1, true)
      or (status ~= 'running' and next_status == 'running') then
    reason = 'STATUS'
  elseif holder ~= '' then
    local lease_expires, _, _, held_epoch = lease_unpack(ls)
    if not (status == 'running' and lo == holder and held_epoch == a.epoch
        and lease_expires and lease_expires > now) then
      reason = 'FENCED'
    end
  end
  if reason ~= 'OK' then
    local up
    up, rs, er = unpack(redis.call('HMGET', k.task, 'up', 'rs', 'er'))
    return {0, reason, status, cx, cr, up, rs, er}
  end
  local result, err = rs, er
  local seq = tonumber(sq or '0') + 1
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
    has_push = finish_task(k, a.id, ph, retention_ms, now, {owner = ow, retention = rt,
      seq = sq, sizes = #(result or '') + #(err or ''), notify = nc, fields_known = true}, acc)
    if next_status == 'failed' then index_failed(k.failed, a.id, now, retention_ms) end
    if holder == '' and lo then
      redis.call('PUBLISH', worker_prefix .. lo, a.id)
    end
  end
  if next_status ~= 'running' then
    publish_event(a.channel, seq, a.event, a.data, nc, k.push, has_push)
  else
    log_event(k.events, a.channel, seq, a.event, a.data, log_len, nc, k.push)
  end
  return {1, reason, next_status, cx, cr, now, result, err}
end
