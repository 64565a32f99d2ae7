"""A real HTTP server on 127.0.0.1 that speaks just enough of the OpenAI chat-completions API,
and injects faults on request.

Each request takes the next scripted action (the last one repeats):

* ``("ok", text, finish_reason)``: a chat completion with that text (``text=None``: the
  responder's reply);
* ``("respond",)``: a completion whose text is ``responder(messages)`` (answers by content);
* ``("status", code, headers[, message])``: an error status with a JSON error body;
* ``("sleep", seconds)``: wait, then answer ``"late"`` (a slow server);
* ``("raw", body)``: an HTTP 200 with that body (e.g. truncated or garbage JSON);
* faults (see :data:`FAULTS`): ``("timeout", seconds)`` holds the request past the client's
  timeout and closes the connection without a reply; ``("truncated", "body")`` is a 200 whose
  complete body is half a completion; ``("truncated", "connection")`` announces the whole body,
  sends half and closes; ``("garbage",)`` is a 200 with binary garbage; ``("empty_choices",)``
  a valid completion with no choices.

:meth:`FakeOpenAIServer.inject` lays a fault over the script: on every request until
:meth:`heal`, or on the first ``first`` requests (of each distinct request body with
``per_body=True``: "valid after N failures").

Requests are recorded (path, body, a hash of the body, arrival time, outcome). Per body hash
the server counts requests (``attempts``), completions it delivered (``successes``) and requests
that arrived while another with the same body was still being handled (``overlaps``), so a test
can check that no successful call was repeated. At most ``max_requests`` are answered, the rest
get 418 so a runaway retry loop cannot hang a test.
"""
from __future__ import annotations

import hashlib
import json
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

#: One action per fault kind the reliability tests drive (timeouts hold the request 3 s: give
#: the client a per-try timeout well under that).
FAULTS: dict[str, tuple] = {
    "timeout": ("timeout", 3.0),
    "429": ("status", 429, {"Retry-After": "1"}),
    "500": ("status", 500),
    "truncated_body": ("truncated", "body"),
    "cut_connection": ("truncated", "connection"),
    "garbage": ("garbage",),
    "empty_choices": ("empty_choices",),
}
GARBAGE = b"\x89PNG\r\n\x1a\n\x00\xff\xfe<html>502 Bad Gateway</ht\xc3\x28 {\"choices\": [" + bytes(range(256))

Responder = Callable[[list[dict]], str]


class _Server(ThreadingHTTPServer):
    # a listen backlog for many concurrent clients (the default 5 makes the 6th connect wait ~1 s)
    request_queue_size = 256


def body_hash(body: dict) -> str:
    """SHA-256 of a request body's canonical JSON (same request, same hash)."""
    return hashlib.sha256(json.dumps(body, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


class Headers(dict):
    """A request's headers, looked up case-insensitively as HTTP defines them (clients differ in
    the case they send: ``Authorization`` or ``authorization``)."""

    def __init__(self, items=()):
        super().__init__((k.lower(), v) for k, v in items)

    def __getitem__(self, name: str):
        return super().__getitem__(name.lower())

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and super().__contains__(name.lower())

    def get(self, name: str, default=None):
        return super().get(name.lower(), default)


class FakeOpenAIServer:
    """The server; use it as a context manager (``with FakeOpenAIServer(...) as srv:``)."""

    def __init__(self, actions: Sequence[tuple] | None = None, max_requests: int = 20, *,
                 responder: Responder | None = None, port: int = 0):
        self.responder = responder
        if actions is None:
            actions = [("respond",)] if responder is not None else [("ok", "ok", "stop")]
        self.actions = list(actions)
        self.max_requests = max_requests
        self.requests: list[dict] = []
        self.headers: list[dict] = []
        self.attempts: Counter[str] = Counter()
        self.successes: Counter[str] = Counter()
        self.overlaps = 0
        self._inflight: Counter[str] = Counter()
        self._fault: tuple | None = None
        self._fault_first: int | None = None
        self._fault_per_body = False
        self._fault_seen: Counter[str] = Counter()
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
                h = body_hash(body)
                record = {"path": self.path, "body": body, "hash": h, "t": time.monotonic(), "outcome": None}
                with server._lock:
                    n = len(server.requests)
                    server.requests.append(record)
                    server.headers.append(Headers(self.headers.items()))
                    server.attempts[h] += 1
                    if server._inflight[h]:
                        server.overlaps += 1
                    server._inflight[h] += 1
                    action = server._choose(n, h)
                try:
                    record["outcome"] = self._act(n, body, action)
                finally:
                    with server._lock:
                        server._inflight[h] -= 1
                        if record["outcome"] == "ok":
                            server.successes[h] += 1

            def _act(self, n: int, body: dict, action: tuple) -> str:
                """Carry out one action; returns the outcome ("ok" only for a delivered completion)."""
                if n >= server.max_requests:
                    self._send(418, {"error": {"message": "too many requests in test"}})
                    return "refused"
                kind = action[0]
                if kind == "sleep":
                    server._stop.wait(action[1])
                    if server._stop.is_set():
                        return "stopped"
                    action, kind = ("ok", "late", "stop"), "ok"
                if kind == "timeout":      # hold the request past the client's timeout, never answer
                    server._stop.wait(action[1])
                    self.close_connection = True
                    return "timeout"
                if kind == "raw":          # a 200 whose body is not (valid) JSON
                    self._send_bytes(200, action[1].encode())
                    return "raw"
                if kind == "garbage":
                    self._send_bytes(200, GARBAGE)
                    return "garbage"
                if kind == "status":
                    code, extra = action[1], (action[2] if len(action) > 2 else {})
                    message = action[3] if len(action) > 3 else f"scripted {code}"
                    self._send(code, {"error": {"message": message, "type": "test"}}, extra)
                    return f"status {code}"
                if kind == "empty_choices":
                    self._send(200, server.completion(n, body, None))
                    return "empty_choices"
                text = action[1] if kind == "ok" else None
                finish = action[2] if kind == "ok" else "stop"
                if text is None:
                    try:
                        text = server.responder(body.get("messages", []))
                    except Exception as e:  # noqa: BLE001 - a broken responder must show, not hang
                        self._send(500, {"error": {"message": f"responder failed: {e!r}", "type": "test"}})
                        return "responder error"
                data = json.dumps(server.completion(n, body, text, finish)).encode()
                if kind == "truncated":
                    half = data[:len(data) // 2]
                    if action[1] == "connection":   # promise the whole body, send half, hang up
                        self._send_bytes(200, half, length=len(data))
                        self.close_connection = True
                    else:
                        self._send_bytes(200, half)
                    return "truncated"
                return "ok" if self._send_bytes(200, data) else "client gone"

            def _send(self, code, payload, extra_headers=None):
                return self._send_bytes(code, json.dumps(payload).encode(), extra_headers)

            def _send_bytes(self, code, data, extra_headers=None, length=None) -> bool:
                try:
                    self.send_response(code)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data) if length is None else length))
                    for k, v in (extra_headers or {}).items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(data)
                    self.wfile.flush()
                    return True
                except (BrokenPipeError, ConnectionResetError):  # client gave up (timeout)
                    return False

        self.httpd = _Server(("127.0.0.1", port), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                       daemon=True)

    # ------------------------------------------------------------------ faults
    def inject(self, action: tuple | str, *, first: int | None = None, per_body: bool = False) -> None:
        """Answer with ``action`` (a tuple or a :data:`FAULTS` name) instead of the script: until
        :meth:`heal` (``first=None``), or for the first ``first`` requests from now on (of each
        distinct request body when ``per_body``), after which the script answers again."""
        with self._lock:
            self._fault = FAULTS[action] if isinstance(action, str) else tuple(action)
            self._fault_first, self._fault_per_body = first, per_body
            self._fault_seen = Counter()

    def heal(self) -> None:
        """Stop injecting faults: the script answers every later request."""
        with self._lock:
            self._fault = None

    def _choose(self, n: int, h: str) -> tuple:
        """The action for request ``n`` with body hash ``h`` (called under the lock)."""
        if self._fault is not None:
            key = h if self._fault_per_body else ""
            self._fault_seen[key] += 1
            if self._fault_first is None or self._fault_seen[key] <= self._fault_first:
                return self._fault
        return self.actions[min(n, len(self.actions) - 1)]

    @staticmethod
    def completion(n: int, body: dict, text: str | None, finish: str = "stop") -> dict:
        """A chat-completion body with ``text`` (``None``: an empty ``choices`` list)."""
        choices = [] if text is None else [{"index": 0, "finish_reason": finish,
                                            "message": {"role": "assistant", "content": text}}]
        return {"id": f"chatcmpl-{n}", "object": "chat.completion", "created": 0,
                "model": body.get("model", "?"), "choices": choices,
                "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}}

    # ------------------------------------------------------------------ inspection
    @property
    def base_url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    @property
    def count(self) -> int:
        with self._lock:
            return len(self.requests)

    def repeated_successes(self) -> dict[str, int]:
        """Request bodies that got a completion more than once (hash -> how many times)."""
        with self._lock:
            return {h: c for h, c in self.successes.items() if c > 1}

    def outcomes(self) -> Counter[str]:
        """How many requests ended each way ("ok", "status 500", "timeout", ...)."""
        with self._lock:
            return Counter(str(r["outcome"]) for r in self.requests)

    def __enter__(self) -> FakeOpenAIServer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)
