"""A Lucid-profile agent on Python's standard library: `shout` (invoke) and `tick` (stream)."""
import json, os, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TEXT = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}
CARD = {"name": "py-agent", "entrypoints": {
    "shout": {"description": "Returns its text in capitals", "streaming": False, "input_schema": TEXT},
    "tick": {"description": "Counts to n, a delta each", "streaming": True,
             "input_schema": {"type": "object", "properties": {"n": {"type": "integer"}}}}}}
TOKEN = os.environ.get("AGENT_TOKEN")  # when set, every run must bring it as a bearer token

class Agent(BaseHTTPRequestHandler):
    def answer(self, status, body, kind="application/json"):
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.end_headers()
        self.wfile.write(json.dumps(body).encode() if body is not None else b"")

    def do_GET(self):
        found = self.path == "/.well-known/agent-card.json"
        self.answer(200 if found else 404, CARD if found else {"error": {"code": "not_found"}})
    def do_POST(self):
        if TOKEN and self.headers.get("Authorization") != f"Bearer {TOKEN}":
            return self.answer(401, {"error": {"code": "unauthorized", "message": "bad token"}})
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        key, route = (self.path.split("/") + ["", ""])[2:4]  # /entrypoints/KEY/ROUTE
        task, given = self.headers.get("X-Task-Id"), body.get("input") or {}
        if (key, route) == ("shout", "invoke"):
            return self.answer(200, {"output": {"text": given["text"].upper(), "task": task}})
        if (key, route) == ("tick", "stream"):
            self.answer(200, None, "text/event-stream")  # HTTP/1.0: the close ends the stream
            n = int(given.get("n", 3))
            for event, data in [("delta", {"delta": i}) for i in range(1, n + 1)] + [
                    ("run-end", {"status": "succeeded", "output": {"count": n}})]:
                self.wfile.write(f"event: {event}\ndata: {json.dumps(data)}\n\n".encode())
            return
        self.answer(404, {"error": {"code": "entrypoint_not_found", "message": self.path}})

ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1]) if len(sys.argv) > 1 else 8787), Agent).serve_forever()
