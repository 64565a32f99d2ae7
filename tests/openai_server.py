"""A real HTTP server on 127.0.0.1 that speaks just enough of the OpenAI chat-completions API.

Each request takes the next scripted action (the last one repeats): ``("ok", text,
finish_reason)``, ``("status", code, headers)``, ``("sleep", seconds)`` or ``("raw", body)`` (an
HTTP 200 with that body, e.g. truncated or garbage JSON). Requests are
recorded; at most ``max_requests`` are answered, the rest get 418 so a runaway retry loop
cannot hang a test.
"""
from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class FakeOpenAIServer:
    def __init__(self, actions, max_requests: int = 20):
        self.actions = list(actions)
        self.max_requests = max_requests
        self.requests: list[dict] = []
        self.headers: list[dict] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # keep test output clean
                pass

            def do_POST(self):
                length = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(length) or b"{}")
                with server._lock:
                    n = len(server.requests)
                    server.requests.append({"path": self.path, "body": body})
                    server.headers.append(dict(self.headers))
                    action = server.actions[min(n, len(server.actions) - 1)]
                if n >= server.max_requests:
                    return self._send(418, {"error": {"message": "too many requests in test"}})
                kind = action[0]
                if kind == "sleep":
                    server._stop.wait(action[1])
                    if server._stop.is_set():
                        return
                    action = ("ok", "late", "stop")
                    kind = "ok"
                if kind == "raw":      # a 200 whose body is not (valid) JSON
                    return self._send_bytes(200, action[1].encode())
                if kind == "status":
                    code, extra = action[1], (action[2] if len(action) > 2 else {})
                    return self._send(code, {"error": {"message": f"scripted {code}",
                                                       "type": "test"}}, extra)
                text, finish = action[1], action[2]
                self._send(200, {
                    "id": f"chatcmpl-{n}", "object": "chat.completion", "created": 0,
                    "model": body.get("model", "?"),
                    "choices": [{"index": 0, "finish_reason": finish,
                                 "message": {"role": "assistant", "content": text}}],
                    "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18},
                })

            def _send(self, code, payload, extra_headers=None):
                self._send_bytes(code, json.dumps(payload).encode(), extra_headers)

            def _send_bytes(self, code, data, extra_headers=None):
                try:
                    self.send_response(code)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    for k, v in (extra_headers or {}).items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):  # client gave up (timeout)
                    pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                       daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    @property
    def count(self) -> int:
        with self._lock:
            return len(self.requests)

    def __enter__(self) -> FakeOpenAIServer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)
