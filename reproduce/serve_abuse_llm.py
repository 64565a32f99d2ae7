"""A slow scripted OpenAI-compatible chat server on 127.0.0.1 that watches its clients (``serve-abuse``).

Each chat completion tagged ``[abuse-N]`` takes ``delay`` seconds (an untagged one, a warm-up's,
``untagged_delay``: none by default). Meanwhile the handler polls its socket (every
:data:`POLL_S`): when the client closes the connection (end of stream or a reset), the call ends
there, unanswered. So, from this server's side, a call runs from the moment its request arrived
until the client closed the connection or the reply was sent; :class:`LLMCall` keeps those times
(``time.monotonic``, the harness's clock: the server runs in the harness's process). A call is
matched to the ``/answer`` request that caused it by a tag ``[abuse-N]`` anywhere in its messages
(the harness puts it in the question). Replies are ``Answer: ...`` (a plain JSON completion, or
server-sent chunks when the request asks for ``stream``). Everything stops with the context manager;
handlers still waiting end within :data:`POLL_S`.
"""
from __future__ import annotations

import json
import re
import select
import socket
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

#: seconds between two looks at a waiting call's socket
POLL_S = 0.05
_TAG = re.compile(r"\[abuse-(\d+)\]")


@dataclass
class LLMCall:
    """One chat completion as this server saw it."""
    tag: int | None           # the N of ``[abuse-N]`` in its messages (None: untagged)
    start: float
    end: float | None = None  # when the client closed the connection or the reply was sent
    how: str = "running"      # running | closed (by the client) | replied

    def running_at(self, t: float) -> bool:
        """Whether the call was still running at monotonic time ``t``."""
        return self.start <= t and (self.end is None or self.end > t)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 512


def _client_gone(sock: socket.socket) -> bool:
    """Whether the peer closed (or reset) the connection; waits at most :data:`POLL_S`."""
    try:
        readable, _, _ = select.select([sock], [], [], POLL_S)
        if not readable:
            return False
        return sock.recv(1, socket.MSG_PEEK) == b""
    except (ConnectionError, OSError):
        return True


def _completion(model: str, text: str, stream: bool) -> bytes:
    """The reply's body: one completion, or its server-sent chunks."""
    if not stream:
        return json.dumps({"id": "abuse", "object": "chat.completion", "model": model,
                           "choices": [{"index": 0, "finish_reason": "stop",
                                        "message": {"role": "assistant", "content": text}}],
                           "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}).encode()
    chunks = [{"id": "abuse", "object": "chat.completion.chunk", "model": model,
               "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
              for delta, finish in (({"role": "assistant", "content": text}, None), ({}, "stop"))]
    return "".join(f"data: {json.dumps(c)}\n\n" for c in chunks).encode() + b"data: [DONE]\n\n"


class SlowLLM:
    """``with SlowLLM(delay=20) as llm: llm.base_url``; ``llm.calls()`` lists what it saw."""

    def __init__(self, delay: float, answer: str = "Answer: the memory does not say", untagged_delay: float = 0.0):
        self.delay, self.answer, self.untagged_delay = float(delay), answer, float(untagged_delay)
        self._calls: list[LLMCall] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_POST(self):
                owner._handle(self)

        self._httpd = _Server(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True, name="slow-llm")

    def _handle(self, h: BaseHTTPRequestHandler) -> None:
        """Wait ``delay`` seconds unless the client leaves first; then reply."""
        body = json.loads(h.rfile.read(int(h.headers.get("Content-Length", 0))) or b"{}")
        found = _TAG.search(json.dumps(body.get("messages", [])))
        call = LLMCall(int(found.group(1)) if found else None, time.monotonic())
        with self._lock:
            self._calls.append(call)
        deadline = call.start + (self.delay if call.tag is not None else self.untagged_delay)
        while time.monotonic() < deadline and not self._stopping.is_set():
            if _client_gone(h.connection):
                call.end, call.how = time.monotonic(), "closed"
                h.close_connection = True
                return
        stream = bool(body.get("stream"))
        data = _completion(body.get("model", "m"), self.answer, stream)
        try:
            h.send_response(200)
            h.send_header("Content-Type", "text/event-stream" if stream else "application/json")
            h.send_header("Content-Length", str(len(data)))
            h.end_headers()
            h.wfile.write(data)
            h.wfile.flush()
            call.how = "replied"
        except OSError:
            call.how = "closed"
        call.end = time.monotonic()

    def calls(self) -> list[LLMCall]:
        """The calls so far (copies of the records: later changes are not seen)."""
        with self._lock:
            return [LLMCall(c.tag, c.start, c.end, c.how) for c in self._calls]

    def __enter__(self) -> SlowLLM:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stopping.set()
        self._httpd.shutdown()
        self._httpd.server_close()
