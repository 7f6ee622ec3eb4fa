-- num_str(n): the integer n as the decimal string a command takes, made once per script call.
-- Why not pass the number: Redis 7.0 formats every number a script hands to redis.call with
-- snprintf("%.17g") (and Lua's `..` with "%.14g"), about 0.7 µs each; a drain's scripts pass
-- a dozen per task (deadlines, epochs, sequence numbers, sizes, expiries), and printf was the
-- largest single item in a profile of redis-server under a drain (about 8 % of its CPU).
-- A string argument goes to the command as it is. Most of these numbers repeat within a call
-- (the clock, a take's lease deadline, the retention), so each is formatted once per call: the
-- cache is a local of the script's body, made anew by every call. Integers (timestamps in ms,
-- counts, sizes: every value the scripts give it) take "%d"; anything else takes what Redis
-- itself would write for the number ("%.17g"), so that a fraction is never cut off
-- (tests/tests/store/lua_includes.rs).
local num_strs = {}
local function num_str(n)
  local s = num_strs[n]
  if s == nil then
    if n % 1 == 0 then
      s = string.format('%d', n)
    else
      s = string.format('%.17g', n)
    end
    num_strs[n] = s
  end
  return s
end
