-- streams spike, finish: fenced completions of one consumer (a worker incarnation), a batch per
-- call. An item is written only while its entry is still pending to this consumer with the
-- delivery count the worker was given (the entry's epoch): a reclaimed entry (XAUTOCLAIM moved
-- it to another consumer and raised its count) or one already acknowledged is refused. Then the
-- results are kept for retention (a key per task with PX, or a field in a hash bucket per
-- minute of the entry's creation with PEXPIRE), the entries are acknowledged and deleted (7.0
-- has no XACKDEL), and one event is published for the whole batch.
-- Mode 'record' keeps the service's shape instead: each task has a record (a hash written when
-- it was added) that the finish completes without reading it back (HSET status, updated, seq,
-- result; PEXPIRE retention), and the retained-task bookkeeping is written once per batch:
-- one SREM of the live set, one ZADD of the retained set (scored by expiry), one HSET of the
-- retained sizes and one INCRBY of their sum (a size from the lengths the script has, not
-- MEMORY USAGE, which would be one more command per task).
--
-- KEYS[1] stream  KEYS[1 + i] result key of item i (mode 'key'), its bucket hash ('bucket') or
--   its record ('record')  KEYS[2 + n ..] mode 'record' only: live set, retained set, retained
--   sizes, retained bytes
-- ARGV[1] group  ARGV[2] consumer  ARGV[3] retention ms  ARGV[4] mode  ARGV[5] channel
-- ARGV[6] lowest entry id of the batch  ARGV[7] highest  ARGV[8] XPENDING bound
-- ARGV[9] flags: 't': acknowledged entries leave the stream by one `XTRIM MINID ~` per batch
--   instead of an `XDEL` of each (see below); 'e': each written task's event is also published
--   on its own channel (`<channel>:<task>`, "<seq>|resultUpdate|<result>", as the service's
--   subscribers hear it), besides the one message per batch
-- ARGV[10 ..] per item: entry id, expected delivery count, task id, result
-- Returns per item 1 (written) or 0 (refused).

local stream = KEYS[1]
local group, consumer, retention, mode, channel = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local bound = tonumber(ARGV[8])
local n = (#ARGV - 9) / 4
local trim = string.find(ARGV[9], 't', 1, true) ~= nil
local each = string.find(ARGV[9], 'e', 1, true) ~= nil
local record = mode == 'record'
local now, live, retained = nil, {}, {}
if record then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
-- A record's size beyond its result: its other fields and the hash's own overhead (an
-- estimate; the service measures it today).
local RECORD_OVERHEAD = 160

-- The fence: one look at this consumer's pending entries over the batch (held_by.lua).
local held = held_by(stream, group, consumer, ARGV[6], ARGV[7], bound)

local out, acked, buckets = {}, {}, {}
for i = 0, n - 1 do
  local a = 10 + i * 4
  local id, count = ARGV[a], tonumber(ARGV[a + 1])
  if held(id, count) then
    local key = KEYS[2 + i]
    if mode == 'key' then
      redis.call('SET', key, ARGV[a + 3], 'PX', retention)
    elseif record then
      redis.call('HSET', key, 'st', 'completed', 'up', now, 'sq', 2, 'rs', ARGV[a + 3])
      redis.call('PEXPIRE', key, retention)
      live[#live + 1] = ARGV[a + 2]
      retained[#retained + 1] = ARGV[a + 2]
      retained[#retained + 1] = #ARGV[a + 3] + RECORD_OVERHEAD
    else
      local fields = buckets[key]
      if not fields then fields = {}; buckets[key] = fields end
      fields[#fields + 1] = ARGV[a + 2]
      fields[#fields + 1] = ARGV[a + 3]
    end
    if each then
      redis.call('PUBLISH', channel .. ':' .. ARGV[a + 2], '2|resultUpdate|' .. ARGV[a + 3])
    end
    acked[#acked + 1] = id
    out[#out + 1] = 1
  else
    out[#out + 1] = 0
  end
end
for key, fields in pairs(buckets) do
  redis.call('HSET', key, unpack(fields))
  redis.call('PEXPIRE', key, retention)
end
if #live > 0 then
  local k = 2 + n
  local scored, bytes = {}, 0
  for i = 1, #retained, 2 do
    scored[#scored + 1] = now + retention
    scored[#scored + 1] = retained[i]
    bytes = bytes + retained[i + 1]
  end
  redis.call('SREM', KEYS[k], unpack(live))
  redis.call('ZADD', KEYS[k + 1], unpack(scored))
  redis.call('HSET', KEYS[k + 2], unpack(retained))
  redis.call('INCRBY', KEYS[k + 3], bytes)
end
if #acked > 0 then
  redis.call('XACK', stream, group, unpack(acked))
  if trim then
    -- Entries are delivered in id order, so every entry below the oldest one still pending and
    -- at or below the highest this batch acknowledged was delivered and acknowledged: the
    -- stream can drop all of them at once. `~` trims whole nodes only, the cheap way; a few
    -- acknowledged entries wait for a later batch.
    local summary = redis.call('XPENDING', stream, group)
    local _, hi = string.match(ARGV[7], '^(%d+)-(%d+)$')
    local minid = string.match(ARGV[7], '^(%d+)-') .. '-' .. (tonumber(hi) + 1)
    if summary[1] > 0 and summary[2] then
      local a_ms, a_seq = string.match(summary[2], '^(%d+)-(%d+)$')
      local b_ms, b_seq = string.match(minid, '^(%d+)-(%d+)$')
      if tonumber(a_ms) < tonumber(b_ms)
          or (a_ms == b_ms and tonumber(a_seq) < tonumber(b_seq)) then
        minid = summary[2]
      end
    end
    redis.call('XTRIM', stream, 'MINID', '~', minid)
  else
    redis.call('XDEL', stream, unpack(acked))
  end
  redis.call('PUBLISH', channel, consumer .. ' ' .. #acked)
end
return out
