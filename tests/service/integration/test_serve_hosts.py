"""Issue 37 (1, 8): ``hippo-engine serve --host 127.0.0.2 --allowed-hosts ...`` for real (the command in a
subprocess, the real memory on SQLite with extractor ``ner`` and the packaged embedder): REST and ``/mcp``
(the official MCP client) answer at 127.0.0.2 and under the allowed names, with or without a port; a
foreign Host gets the 400 JSON error on REST routes, the web page, ``/health`` and ``/mcp`` alike (before
this, ``/mcp`` answered 421 plain text for any Host but 127.0.0.1/localhost/[::1] with a port, and REST
accepted any Host)."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("uvicorn", reason="the server extra")

HOST = "127.0.0.2"
FOREIGN = "rebind.attacker.example"
REPO = Path(__file__).resolve().parents[3]
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """The server; yields its base URL (at 127.0.0.2)."""
    root = tmp_path_factory.mktemp("serve-hosts")
    port, log = _free_port(HOST), root / "serve.log"
    env = {**os.environ, "PYTHONPATH": str(REPO), "HIPPO_ENGINE_ACCESS_KEY": ""}
    cmd = [sys.executable, "-m", "hippo_engine.cli", "serve", "--save-dir", str(root / "memory"), "--host", HOST,
           "--port", str(port), "--extractor", "ner", "--llm", "m", "--llm-base-url", "http://127.0.0.1:9/v1",
           "--api-key", "none", "--allowed-hosts", "memory.test, proxy.test:8443"]
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=REPO)
    url = f"http://{HOST}:{port}"
    try:
        deadline = time.monotonic() + 300
        while True:
            try:
                if httpx.get(f"{url}/health", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text(errors="replace")
            time.sleep(0.3)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _mcp_session(url: str, host: str | None) -> dict:
    """The official client over streamable HTTP: tools, remember, recall, memory_stats."""
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    async def main() -> dict:
        headers = {"Host": host} if host else {}
        async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=300)) as http:
            async with Client(streamable_http_client(f"{url}/mcp", http_client=http)) as client:
                tools = {t.name for t in (await client.list_tools()).tools}
                note = f"The Quillon Vault lies beneath the harbour of Maresk ({host})."
                remembered = await client.call_tool("remember", {"texts": [note], "ids": [f"vault-{host}"]})
                recalled = await client.call_tool("recall", {"query": "Where is the Quillon Vault?"})
                stats = await client.call_tool("memory_stats", {})
                return {"tools": tools, "remember": remembered.structured_content,
                        "recall": recalled.structured_content, "stats": stats.structured_content}
    return anyio.run(main)


@pytest.mark.parametrize("host", [None, "memory.test", "memory.test:8080", "proxy.test:8443", "localhost"])
def test_rest_and_mcp_answer_at_the_bound_address_and_the_allowed_names(served, host):
    headers = {"Host": host} if host else {}
    assert httpx.get(f"{served}/stats", headers=headers, timeout=30).status_code == 200
    assert httpx.get(f"{served}/", headers=headers, timeout=30).status_code == 200
    out = _mcp_session(served, host)
    assert {"remember", "recall", "forget", "memory_stats", "answer"} <= out["tools"]
    assert out["remember"]["status"] == "indexed", out["remember"]
    assert out["recall"]["passages"], out["recall"]
    assert out["stats"]["documents"]["indexed"] >= 1


@pytest.mark.parametrize("host", [FOREIGN, f"{FOREIGN}:8103", "proxy.test", "proxy.test:80", "memory.test.evil"])
def test_a_foreign_host_gets_400_json_on_rest_the_page_and_mcp(served, host):
    for method, path in [("GET", "/stats"), ("GET", "/health"), ("GET", "/"), ("GET", "/docs"),
                         ("GET", "/openapi.json"), ("GET", "/documents"), ("DELETE", "/documents/x")]:
        r = httpx.request(method, f"{served}{path}", headers={"Host": host}, timeout=30)
        assert r.status_code == 400 and r.json()["error"]["type"] == "bad_request", (method, path, r.text)
    r = httpx.post(f"{served}/documents", json={"documents": [{"text": "x"}]}, headers={"Host": host}, timeout=30)
    assert r.status_code == 400, r.text
    r = httpx.post(f"{served}/mcp", json=INIT, headers={**MCP_HEADERS, "Host": host}, timeout=30)
    assert r.status_code == 400 and r.json()["error"]["type"] == "bad_request", r.text


def test_a_foreign_origin_is_refused_on_mcp_and_writes(served):
    evil = {"Origin": "http://evil.example"}
    r = httpx.post(f"{served}/mcp", json=INIT, headers={**MCP_HEADERS, **evil}, timeout=30)
    assert r.status_code == 403 and r.json()["error"]["type"] == "forbidden", r.text
    r = httpx.post(f"{served}/documents", json={"documents": [{"text": "x"}]}, headers=evil, timeout=30)
    assert r.status_code == 403, r.text
    same = httpx.post(f"{served}/mcp", json=INIT, headers={**MCP_HEADERS, "Origin": served}, timeout=30)
    assert same.status_code == 200, same.text


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            if ppid == pid:
                found.append(int(entry.name))
    return found


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_two_workers_get_their_settings_without_secrets_in_any_environment(tmp_path):
    """Issue 37 (10, 12): ``serve --workers 2`` with an LLM key and an access key: the workers serve with
    the key (from the private settings file), no worker has a secret in its environment (nor the server
    the LLM key; its own environment block keeps the access key it was started with),
    the file is gone after the stop, and the workers' access log redacts a key sent in the query string."""
    port, log = _free_port("127.0.0.1"), tmp_path / "serve.log"
    env = {**os.environ, "PYTHONPATH": str(REPO), "HIPPO_ENGINE_ACCESS_KEY": "access-secret-1"}
    cmd = [sys.executable, "-m", "hippo_engine.cli", "serve", "--save-dir", str(tmp_path / "memory"), "--port",
           str(port), "--workers", "2", "--extractor", "ner", "--llm", "m", "--llm-base-url",
           "http://127.0.0.1:9/v1", "--api-key", "llm-secret-2"]
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=REPO)
    url, key = f"http://127.0.0.1:{port}", {"X-API-Key": "access-secret-1"}
    try:
        deadline = time.monotonic() + 300
        while True:
            try:
                if httpx.get(f"{url}/stats", headers=key, timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text(errors="replace")
            time.sleep(0.3)
        fresh = {**key, "Connection": "close"}
        assert {httpx.get(f"{url}/stats", headers=fresh, timeout=30).status_code for _ in range(6)} == {200}
        assert httpx.get(f"{url}/stats", timeout=30).status_code == 401
        httpx.get(f"{url}/stats?api_key=query-secret-3", timeout=30)
        pids = [proc.pid, *_children(proc.pid)]
        assert len(pids) >= 3, pids
        environs = {pid: Path(f"/proc/{pid}/environ").read_bytes().decode("utf-8", "replace") for pid in pids}
        files = [v.split("=", 1)[1] for e in environs.values() for v in e.split("\0")
                 if v.startswith("HIPPO_ENGINE_SERVE_SETTINGS_FILE=")]
        assert files and all(Path(f).exists() for f in files)
    finally:
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    for pid, text in environs.items():     # the server's own block is as it was started (the key given there)
        secrets = ["llm-secret-2"] + (["access-secret-1"] if pid != proc.pid else [])
        assert not any(s in text for s in secrets), (pid, [v for v in text.split("\0") if "secret-" in v])
    assert not any(Path(f).exists() for f in files)
    assert "query-secret-3" not in log.read_text(errors="replace")
