-- streams spike, retry later (mode 'record'): a run that failed asking for another attempt. Fenced
-- like a finish (the entry must still be pending to this consumer with the count it was given);
-- the record counts the retry (`ry`), the entry is acknowledged and deleted (the lease goes, so
-- the attempt's later writes are refused), and the task waits in the shard's delayed set until
-- its due time, when due.lua adds it back as a new entry: a new id and delivery count 1, so no
-- write of an earlier attempt can land on the next one. The attempt number is `ry` + the
-- delivery count. Multi-turn tasks would take the same path (acknowledge now, add a new entry
-- when the answer comes).
--
-- KEYS[1] stream  KEYS[2] the task's record  KEYS[3] delayed set
-- ARGV[1] group  ARGV[2] consumer  ARGV[3] entry id  ARGV[4] expected delivery count
-- ARGV[5] task id  ARGV[6] delay ms
-- Returns 1 when the retry is scheduled, 0 when refused.

local stream, group, consumer, entry = KEYS[1], ARGV[1], ARGV[2], ARGV[3]
local mine = redis.call('XPENDING', stream, group, entry, entry, 1, consumer)
if not mine[1] or mine[1][4] ~= tonumber(ARGV[4]) then return 0 end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('HINCRBY', KEYS[2], 'ry', 1)
redis.call('XACK', stream, group, entry)
redis.call('XDEL', stream, entry)
redis.call('ZADD', KEYS[3], now + tonumber(ARGV[6]), ARGV[5])
return 1
