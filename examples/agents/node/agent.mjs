// A Lucid-profile agent on node:http alone: `shout` (invoke) and `tick` (stream).
import http from "node:http";

const text = { type: "object", properties: { text: { type: "string" } }, required: ["text"] };
const card = { name: "node-agent", entrypoints: {
  shout: { description: "Returns its text in capitals", streaming: false, input_schema: text },
  tick: { description: "Counts to n, a delta each", streaming: true,
    input_schema: { type: "object", properties: { n: { type: "integer" } } } } } };
const token = process.env.AGENT_TOKEN; // when set, every run must bring it as a bearer token

const json = (res, status, body) =>
  res.writeHead(status, { "content-type": "application/json" }).end(JSON.stringify(body));
const sse = (res, event, data) => res.write(`event: ${event}\ndata: ${JSON.stringify(data)}\n\n`);

http.createServer(async (req, res) => {
  if (req.method === "GET" && req.url === "/.well-known/agent-card.json") return json(res, 200, card);
  if (token && req.headers.authorization !== `Bearer ${token}`)
    return json(res, 401, { error: { code: "unauthorized", message: "bad token" } });
  const [, , key, route] = req.url.split("/"); // /entrypoints/KEY/ROUTE
  let body = "";
  for await (const chunk of req) body += chunk;
  const input = JSON.parse(body || "{}").input ?? {};
  if (key === "shout" && route === "invoke")
    return json(res, 200, { output: { text: input.text.toUpperCase(), task: req.headers["x-task-id"] } });
  if (key === "tick" && route === "stream") {
    res.writeHead(200, { "content-type": "text/event-stream" });
    const n = input.n ?? 3;
    for (let i = 1; i <= n; i++) sse(res, "delta", { delta: i });
    sse(res, "run-end", { status: "succeeded", output: { count: n } });
    return res.end();
  }
  json(res, 404, { error: { code: "entrypoint_not_found", message: req.url } });
}).listen(Number(process.argv[2] ?? 8787), "127.0.0.1");
