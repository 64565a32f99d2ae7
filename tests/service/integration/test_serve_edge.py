"""Issue 37 (7, 12): the network edge of a real server on 127.0.0.1: ``run_server`` (uvicorn with the
service's protocol) over the fake memory (tests/service/integration/edge_child.py) and raw sockets:
the header timeout closes silent, slow-header and idle kept-alive connections; a body that stops
arriving gets 408 JSON; the connection cap closes the longest-waiting idle connection for a new one and
answers 503 JSON when every connection is busy; 300 idle sockets under ``ulimit -n 256`` leave /health
answering with a short log; a key in the query string is not in the access log; the accept error's
log line is throttled. Every socket goes to 127.0.0.1, every wait is bounded."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("uvicorn", reason="the server extra")

CHILD = Path(__file__).with_name("edge_child.py")
REPO = Path(__file__).resolve().parents[3]
#: the children import the engine of this checkout (not another one installed in the environment)
CHILD_ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def edge_server(tmp_path: Path, *flags: str):
    """The child server; yields (port, the path of its log)."""
    port, log = _free_port(), tmp_path / f"edge-{time.monotonic_ns()}.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, str(CHILD), str(port), *flags], stdout=out,
                                stderr=subprocess.STDOUT, cwd=REPO, env=CHILD_ENV)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text(errors="replace")
            time.sleep(0.1)
        yield port, log
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=10)


def _closed_within(s: socket.socket, seconds: float, trickle: bytes = b"") -> float | None:
    """Seconds until the server closed ``s`` (None: still open after ``seconds``); ``trickle``: bytes sent
    one at a time, 0.2 s apart, meanwhile."""
    start, sent = time.monotonic(), 0
    s.settimeout(0.2)
    while time.monotonic() - start < seconds:
        try:
            if s.recv(65536) == b"":
                return time.monotonic() - start
        except TimeoutError:
            pass
        except ConnectionResetError:
            return time.monotonic() - start
        if sent < len(trickle):
            try:
                s.sendall(trickle[sent:sent + 1])
            except (BrokenPipeError, ConnectionResetError):
                return time.monotonic() - start
            sent += 1
    return None


def _response(s: socket.socket, seconds: float = 10) -> bytes:
    s.settimeout(seconds)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                   if line.lower().startswith(b"content-length")), 0)
    while len(body) < length:
        chunk = s.recv(65536)
        if not chunk:
            break
        body += chunk
    return head + b"\r\n\r\n" + body


def test_connections_without_a_complete_request_head_are_closed(tmp_path):
    """Silent, slow-header and idle kept-alive connections are closed after the header timeout (1 s here);
    a client that sends its request in time is served."""
    with edge_server(tmp_path, "--header-timeout", "1") as (port, _):
        silent, slow, kept = _connect(port), _connect(port), _connect(port)
        kept.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert b" 200 " in _response(kept).split(b"\r\n")[0]
        slow.sendall(b"GET /health HTTP/1.1\r\n")
        trickle = b"X-Slow: " + b"a" * 60
        waited = [_closed_within(silent, 6), _closed_within(slow, 6, trickle), _closed_within(kept, 6, trickle)]
        assert all(w is not None and w < 4 for w in waited), waited
        assert httpx.get(f"http://127.0.0.1:{port}/health", timeout=5).status_code == 200


def test_the_rest_of_a_body_answered_unread_is_timed_like_a_head(tmp_path):
    """A route that answers without reading the body (/health; a 401 before the body alike): the client
    trickling the rest of an endless chunked body is closed after the header timeout."""
    with edge_server(tmp_path, "--header-timeout", "1") as (port, _):
        s = _connect(port)
        s.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\n")
        assert b" 200 " in _response(s).split(b"\r\n")[0]
        waited = _closed_within(s, 6, b"1\r\nb\r\n" * 10)
        assert waited is not None and waited < 4, waited


def test_a_body_that_stops_arriving_gets_408_json(tmp_path):
    with edge_server(tmp_path, "--body-timeout", "1") as (port, _):
        s = _connect(port)
        s.sendall(b"POST /documents HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                  b"Content-Length: 100\r\n\r\n{\"documents\": [")
        start = time.monotonic()
        head, _, body = _response(s, 10).partition(b"\r\n\r\n")
        assert b" 408 " in head.split(b"\r\n")[0] and time.monotonic() - start < 5, head
        assert json.loads(body)["error"]["type"] == "timeout"
        assert _closed_within(s, 3) is not None


def test_the_connection_cap_keeps_room_for_a_new_client(tmp_path):
    """Over the cap (8), a new connection closes the one that has waited longest for a request head; with
    every connection busy (bodies still arriving), a request gets 503 JSON with Retry-After."""
    with edge_server(tmp_path, "--max-connections", "8", "--body-timeout", "20") as (port, _), ExitStack() as stack:
        idle = [stack.enter_context(_connect(port)) for _ in range(20)]
        time.sleep(0.5)
        assert httpx.get(f"http://127.0.0.1:{port}/health", timeout=5).status_code == 200
        closed = sum(_closed_within(s, 0.3) is not None for s in idle)
        assert closed >= 12, closed
        for s in idle:
            s.close()
        busy = [stack.enter_context(_connect(port)) for _ in range(8)]
        for s in busy:
            s.sendall(b"POST /documents HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                      b"Content-Length: 100\r\n\r\n{")
        time.sleep(0.5)
        r = httpx.get(f"http://127.0.0.1:{port}/health", timeout=5)
        assert r.status_code == 503 and r.json()["error"]["type"] == "unavailable", r.text
        assert r.headers["retry-after"] == "1"


def test_idle_sockets_past_the_descriptor_limit_leave_health_answering_and_the_log_short(tmp_path):
    """The issue's case: ``ulimit -n 256`` and 300 idle sockets (and 50 slow-header ones): /health answers
    within seconds, and the log stays small (it was 102,371 "Too many open files" lines in 12 s)."""
    with edge_server(tmp_path, "--nofile", "256", "--header-timeout", "3") as (port, log), ExitStack() as stack:
        socks = [stack.enter_context(_connect(port)) for _ in range(300)]
        for s in socks[:50]:
            s.sendall(b"GET /health HTTP/1.1\r\n")
        time.sleep(2)
        times = []
        for _ in range(5):
            start = time.monotonic()
            assert httpx.get(f"http://127.0.0.1:{port}/health", timeout=10).status_code == 200
            times.append(time.monotonic() - start)
        time.sleep(2)
        size = log.stat().st_size
    assert max(times) < 5, times
    assert size < 100_000, (size, log.read_text(errors="replace")[:3000])


def test_a_key_in_the_query_string_is_not_written_to_the_access_log(tmp_path):
    with edge_server(tmp_path) as (port, log):
        url = f"http://127.0.0.1:{port}/stats?api_key=SECRET-1&KEY=SECRET-2&x-api-key=SECRET-3&Access_Key=SECRET-4" \
              f"&%61pi_key=SECRET-5&keep=visible"
        httpx.get(url, timeout=5)
        httpx.get(f"http://127.0.0.1:{port}/health?token=SECRET-6", timeout=5)
        time.sleep(0.5)
        text = log.read_text(errors="replace")
    assert "SECRET" not in text, text
    assert "api_key=[redacted]" in text and "keep=visible" in text


ACCEPT_CHILD = """
import asyncio, logging, resource, sys
logging.basicConfig(level=logging.INFO, stream=sys.stderr)
from hippo_engine.service.logfilters import install_log_filters
install_log_filters()
resource.setrlimit(resource.RLIMIT_NOFILE, (40, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
held = []
async def handle(reader, writer):
    held.append(writer)         # never closed: the descriptors run out
async def main():
    server = await asyncio.start_server(handle, "127.0.0.1", 0, backlog=2048)
    print(server.sockets[0].getsockname()[1], flush=True)
    await asyncio.sleep(float(sys.argv[1]))
asyncio.run(main())
"""


def test_the_accept_error_is_logged_once_per_interval_with_a_count(tmp_path):
    """Out of descriptors, asyncio's accept loop logged one traceback per listen-backlog slot each second."""
    log = tmp_path / "accept.log"
    with open(log, "wb") as err:
        proc = subprocess.Popen([sys.executable, "-c", ACCEPT_CHILD, "6"], stdout=subprocess.PIPE, stderr=err,
                                cwd=REPO, env=CHILD_ENV)
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline())
        with ExitStack() as stack:
            for _ in range(120):
                stack.enter_context(_connect(port))
            proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    lines = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    accept = [ln for ln in lines if "out of system resource" in ln]
    assert 1 <= len(accept) <= 3 and len(lines) < 20, lines[:40]
    assert "Too many open files" in accept[0]
