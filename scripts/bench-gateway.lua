-- wrk script of scripts/bench-gateway: one fixed request per scenario, chosen by the first
-- argument after `--`:
--
--   wrk -t2 -c64 -d15s --latency -s scripts/bench-gateway.lua http://127.0.0.1:8080 -- card
--
--   card    GET  /.well-known/agent-card.json
--   invoke  POST /entrypoints/echo/invoke   {"input":{"x":1}}
--   tasks   POST /tasks (Task-Access-Token) {"skillId":"echo","message":{...}}
--   a2a     POST /a2a/jsonrpc SendMessage to echo (bearer token, A2A-Version 1.0)
--
-- The request is built once per thread (no request() or response() callback), so the script
-- costs wrk nothing per request; wrk's own summary counts status >= 400 and socket errors.

local token = "0123456789abcdef0123456789abcdef0123"

local scenarios = {
  card = { method = "GET", path = "/.well-known/agent-card.json" },
  invoke = {
    method = "POST",
    path = "/entrypoints/echo/invoke",
    body = '{"input":{"x":1}}',
    headers = { ["Content-Type"] = "application/json" },
  },
  tasks = {
    method = "POST",
    path = "/tasks",
    body = '{"skillId":"echo","message":{"role":"user","content":{"text":"{\\"x\\":1}"}}}',
    headers = { ["Content-Type"] = "application/json", ["Task-Access-Token"] = token },
  },
  a2a = {
    method = "POST",
    path = "/a2a/jsonrpc",
    body = '{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"role":"ROLE_USER",'
      .. '"messageId":"bench","parts":[{"data":{"x":1}}],"metadata":{"skillId":"echo"}}}}',
    headers = {
      ["Content-Type"] = "application/json",
      ["Authorization"] = "Bearer " .. token,
      ["A2A-Version"] = "1.0",
    },
  },
}

-- wrk.init calls this before it formats the thread's request, so what is set here is sent.
function init(args)
  local name = args[1] or "card"
  local scenario = scenarios[name]
  if scenario == nil then
    error("unknown scenario '" .. name .. "' (card, invoke, tasks, a2a)")
  end
  -- The URL's path is the base path (BASE_PATH), if any.
  local base = wrk.path or "/"
  if base == "/" then base = "" end
  base = base:gsub("/+$", "")
  wrk.method = scenario.method
  wrk.path = base .. scenario.path
  wrk.body = scenario.body
  for key, value in pairs(scenario.headers or {}) do
    wrk.headers[key] = value
  end
end
