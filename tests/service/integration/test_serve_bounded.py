"""Bounded work against a real ``hippo-engine serve`` (issue 37, items 2-4): the real memory (extractor ``ner``,
the packaged embedder) on 127.0.0.1, its reader a slow scripted OpenAI-compatible server on 127.0.0.1 that
watches its connections (reproduce/serve_abuse_llm.py, 20 s a call). While answers hang, /health answers at
once; one answer more than ``--max-answers`` is 503 with Retry-After; an abandoned answer's LLM call ends (the
LLM server sees its connection close) within about a second and its slot takes a new answer; deleting a
workspace whose batch is being indexed holds up no other workspace; ``--max-open-workspaces`` closes the least
recently used idle workspace (and reopens it on demand)."""
from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time

import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("uvicorn", reason="the server extra")

from service.integration.test_http_server import Serve, add_and_wait  # noqa: E402

from reproduce.serve_abuse_llm import SlowLLM  # noqa: E402

DOCS = [{"id": "velor", "title": "Velor", "text": "Velor is a town in Norwick. Anna Berg founded Velor College."},
        {"id": "ostfeld", "title": "Ostfeld", "text": "Ostfeld lies on the Amber river."}]


@pytest.fixture(scope="module")
def llm():
    with SlowLLM(delay=20, answer="Answer: Anna Berg") as srv:
        yield srv


@pytest.fixture(scope="module")
def server(tmp_path_factory, llm):
    srv = Serve(tmp_path_factory.mktemp("bounded") / "memory", llm.base_url, "--max-answers", "2",
                "--max-open-workspaces", "2")
    try:
        job = add_and_wait(srv.client, DOCS)
        assert job["status"] == "done", job
        assert srv.client.post("/retrieve", json={"query": "Who founded Velor College?"}).status_code == 200  # warm
        yield srv
    finally:
        srv.stop()


def _ask(url: str, body: dict) -> socket.socket:
    """An answer asked for on a socket that stays open until the caller closes it (the client leaving)."""
    host, port = url.removeprefix("http://").split(":")
    data = json.dumps(body).encode()
    sock = socket.create_connection((host, int(port)), timeout=10)
    head = (f"POST /answer HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
            f"X-API-Key: {_key()['X-API-Key']}\r\nContent-Length: {len(data)}\r\n\r\n")
    sock.sendall(head.encode() + data)
    return sock


def _key() -> dict:
    from service.integration.test_http_server import KEY
    return {"X-API-Key": KEY}


def _health_ms(client) -> float:
    t0 = time.perf_counter()
    assert client.get("/health").status_code == 200
    return (time.perf_counter() - t0) * 1000


def test_abandoned_answers_stop_their_llm_calls_and_health_stays_fast(server, llm):
    before = len(llm.calls())
    socks = [_ask(server.url, {"question": "Who founded Velor College? [abuse-1]"}),
             _ask(server.url, {"question": "Who founded Velor College? [abuse-2]", "stream": True})]
    deadline = time.monotonic() + 30
    while len(llm.calls()) < before + 2:
        assert time.monotonic() < deadline, "the answers never reached the LLM"
        time.sleep(0.05)
    with httpx.Client(base_url=server.url, timeout=10, headers=_key()) as c:
        # two LLM calls hang until the sockets close: a health check waiting for them would never answer
        assert max(_health_ms(c) for _ in range(10)) < 3000
        r = c.post("/answer", json={"question": "one too many"})
        assert r.status_code == 503 and r.headers["retry-after"] == "2", r.text
        assert "--max-answers" in r.json()["error"]["message"]
    for sock in socks:
        sock.close()
    left = [time.monotonic()]
    deadline = time.monotonic() + 5
    while any(c.how == "running" for c in llm.calls()[before:]):
        assert time.monotonic() < deadline, f"LLM calls still running: {llm.calls()[before:]}"
        time.sleep(0.05)
    calls = llm.calls()[before:before + 2]
    assert [c.how for c in calls] == ["closed", "closed"]
    assert all(c.end - max(left) < 1.0 for c in calls), (calls, left)   # stopped within a second of leaving
    # the slots are free: two new answers reach the LLM (and are abandoned in turn)
    socks = [_ask(server.url, {"question": f"again {i} [abuse-3]"}) for i in range(2)]
    deadline = time.monotonic() + 30
    while len(llm.calls()) < before + 4:
        assert time.monotonic() < deadline, "the freed slots took no new answer"
        time.sleep(0.05)
    for sock in socks:
        sock.close()


def test_deleting_a_workspace_during_a_batch_holds_up_no_other_workspace(server):
    c = server.client
    many = [{"id": f"d{i}", "text": f"Town {i} lies on river {i}. Mayor {i} founded College {i}."}
            for i in range(200)]
    assert c.post("/w/doomed/documents", json={"documents": many}).status_code == 202
    deadline = time.monotonic() + 60
    while c.get("/w/doomed/documents", params={"status": "processing", "limit": 1}).json()["total"] == 0:
        assert time.monotonic() < deadline, "the batch never started"
        time.sleep(0.05)
    done: dict = {}
    deleting = threading.Thread(target=lambda: done.setdefault("r", c.delete("/workspaces/doomed")))
    deleting.start()
    time.sleep(0.2)
    with httpx.Client(base_url=server.url, timeout=10, headers=_key()) as other:
        t0 = time.perf_counter()
        assert other.get("/stats").status_code == 200
        assert other.post("/retrieve", json={"query": "Who founded Velor College?"}).status_code == 200
        assert time.perf_counter() - t0 < 2.0
    deleting.join(120)
    assert done["r"].status_code == 200
    assert c.get("/w/doomed/stats").status_code == 404


def _open_workspaces(pid: int) -> set[str]:
    """The named workspaces whose files the server process holds open (from /proc)."""
    names = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
            if "/workspaces/" in target:
                names.add(target.split("/workspaces/", 1)[1].split("/", 1)[0])
    return names


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="reads the server's open files from /proc")
def test_the_open_cap_closes_the_least_recently_used_workspace(server):
    c = server.client
    for name in ("w1", "w2", "w3"):     # at most two named workspaces open: w1 is closed for w3
        job = add_and_wait(c, [{"id": f"{name}-doc", "text": f"{name} holds one document about Velor."}],
                           prefix=f"/w/{name}")
        assert job["status"] == "done", job
    assert _open_workspaces(server.proc.pid) == {"w2", "w3"}
    doc = c.get("/w/w1/documents/w1-doc")          # reopened on demand, with its data; w2 closed for it
    assert doc.status_code == 200 and doc.json()["status"] == "indexed"
    assert _open_workspaces(server.proc.pid) == {"w3", "w1"}
