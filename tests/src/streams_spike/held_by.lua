-- streams spike, held_by(stream, group, consumer, lo, hi, bound): the fence of finish.lua and
-- renew.lua (prepended to both by `SpikeQueue::new`). One look at the consumer's pending entries
-- over the batch's id range, not one per item; returns a function telling whether an entry is
-- still pending to that consumer with the delivery count it was given (its epoch). A consumer
-- with `bound` or more entries pending in the range falls back to one XPENDING per entry the
-- first look missed. The range only decides what is looked at: a wrong one refuses a write, it
-- never lets a stale one through.
local function held_by(stream, group, consumer, lo, hi, bound)
  local pending = {}
  local seen = redis.call('XPENDING', stream, group, lo, hi, bound, consumer)
  for _, e in ipairs(seen) do pending[e[1]] = e[4] end
  local partial = #seen >= bound
  return function(id, count)
    local have = pending[id]
    if have == nil and partial then
      local one = redis.call('XPENDING', stream, group, id, id, 1, consumer)
      if one[1] then have = one[1][4] end
    end
    return have ~= nil and have == count
  end
end
