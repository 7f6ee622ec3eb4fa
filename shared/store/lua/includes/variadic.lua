-- variadic(command, key, args, stride): one `command key args...` call, split into calls of at
-- most VARIADIC_MAX values (whole elements of `stride` values each) because Lua 5.1's unpack
-- stops at a few thousand values. Replies are joined: integers summed, arrays concatenated.
-- For the scripts that write a batch's shared keys once rather than once per task.
local VARIADIC_MAX = 1024

local function variadic(command, key, args, stride)
  local per = math.floor(VARIADIC_MAX / stride) * stride
  local total, joined = 0, nil
  for from = 1, #args, per do
    local reply = redis.call(command, key, unpack(args, from, math.min(from + per - 1, #args)))
    if type(reply) == 'table' then
      joined = joined or {}
      for _, v in ipairs(reply) do joined[#joined + 1] = v end
    else
      total = total + reply
    end
  end
  return joined or total
end
