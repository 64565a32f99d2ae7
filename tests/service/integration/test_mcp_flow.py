"""The MCP server end to end, through the SDK's own client, on the real engine (extractor ``ner``, the
packaged embedder) and a scripted OpenAI-compatible reader on 127.0.0.1 (tests/openai_server.py):
list the tools, remember 3 documents, recall each by its id, answer with a citation, forget one, and
recall it no more; over stdio (``hippo-engine mcp`` as a subprocess) and over streamable HTTP (a real
uvicorn on 127.0.0.1)."""
from __future__ import annotations

import contextlib
import json
import os
import shlex
import socket
import sys
import threading
import time
from pathlib import Path

import anyio
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from openai_server import FakeOpenAIServer

ROOT = Path(__file__).resolve().parents[3]
DOCS = {
    "marrow": "Ilse Marrow\nIlse Marrow mapped Lake Veloria in 1873. Ilse Marrow was born in Velor.",
    "fair": "Amber Fair\nThe Amber Fair is held in Velor each autumn. Mira Olt founded the Amber Fair.",
    "pike": "Oren Pike\nOren Pike was a geologist from Brask. Oren Pike wrote Stone Clocks.",
}
QUESTIONS = {"marrow": "Who mapped Lake Veloria?", "fair": "Who founded the Amber Fair?",
             "pike": "Which book did Oren Pike write?"}
TOOLS = {"remember", "recall", "answer", "forget", "memory_stats"}


def cite_first(messages) -> str:
    """The reader: answers with the title of passage [1] and cites it (grounded: the title is in it)."""
    line = next(ln for ln in messages[-1]["content"].splitlines() if ln.startswith("[1] Wikipedia Title: "))
    title = line.removeprefix("[1] Wikipedia Title: ").strip()
    return f"Passage [1] settles it.\nAnswer: {title} [1]"


def data(result) -> dict:
    assert not result.is_error, result.content
    return result.structured_content


async def the_sequence(client) -> dict:
    """The acceptance sequence; returns what each step gave (asserted here and by the callers)."""
    listed = await client.list_tools()
    assert {t.name for t in listed.tools} == TOOLS
    assert all(t.description and t.output_schema for t in listed.tools)
    out: dict = {"remember": data(await client.call_tool(
        "remember", {"texts": list(DOCS.values()), "ids": list(DOCS)}))}
    assert out["remember"]["documents"] == list(DOCS) and out["remember"]["status"] == "indexed", out["remember"]
    for doc_id, question in QUESTIONS.items():
        got = data(await client.call_tool("recall", {"query": question, "top_k": 3}))
        top = got["passages"][0]
        assert top["id"] == doc_id and top["document_ids"] == [doc_id] and top["text"] == DOCS[doc_id], got
        assert top["score"] > 0 and top["explanation"], top
        out.setdefault("recall", {})[doc_id] = got
    answer = data(await client.call_tool("answer", {"question": QUESTIONS["marrow"]}))
    assert answer["answer"] == "Ilse Marrow", answer
    assert [c["id"] for c in answer["citations"]] == ["marrow"] and answer["citations"][0]["text"] == DOCS["marrow"]
    out["answer"] = answer
    out["forget"] = data(await client.call_tool("forget", {"ids": ["marrow"]}))
    assert out["forget"]["deleted"] == ["marrow"] and out["forget"]["unknown"] == []
    after = data(await client.call_tool("recall", {"query": QUESTIONS["marrow"], "top_k": 3}))
    assert "marrow" not in {i for p in after["passages"] for i in p["document_ids"]}, after
    assert all("Ilse Marrow mapped" not in p["text"] for p in after["passages"])
    out["after"] = after
    out["stats"] = data(await client.call_tool("memory_stats", {}))
    assert out["stats"]["documents"].get("indexed") == 2, out["stats"]
    return out


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "OPENAI_BASE_URL")}


def test_over_stdio(tmp_path):
    """``hippo-engine mcp`` started by the client; stdout is teed to a file to check that every line on
    it is a JSON-RPC message (no stray output)."""
    wire, errlog = tmp_path / "stdout.log", tmp_path / "stderr.log"
    with FakeOpenAIServer(responder=cite_first, max_requests=20) as srv:
        cmd = [sys.executable, "-m", "hippo_engine.cli", "mcp", "--save-dir", str(tmp_path / "mem"), "--extractor",
               "ner", "--llm", "m", "--llm-base-url", srv.base_url, "--api-key", "k", "--wait", "300"]
        tee = f"{shlex.join(cmd)} | tee {shlex.quote(str(wire))}"
        params = StdioServerParameters(command="/bin/sh", args=["-c", tee], env=_env(), cwd=str(ROOT))

        async def main():
            with errlog.open("w") as err:
                async with Client(stdio_client(params, errlog=err)) as client:
                    return await the_sequence(client)
        out = anyio.run(main)
        assert len(srv.requests) == 1                          # the answer's one reader call
    assert "via '" in out["recall"]["pike"]["passages"][0]["explanation"]
    lines = wire.read_text().splitlines()
    assert len(lines) >= 10 and all(json.loads(ln)["jsonrpc"] == "2.0" for ln in lines)
    assert "Traceback" not in errlog.read_text()
    assert (tmp_path / "mem").is_dir()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def uvicorn_on_localhost(app):
    """A real uvicorn serving ``app`` on 127.0.0.1 in a thread; yields the base URL."""
    import uvicorn
    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(30)


def _workspaces(root: Path, base_url: str):
    from hippo_engine.service.workspaces import Workspaces
    return Workspaces(root, rag_options={"extractor": "ner", "llm_model_name": "m", "llm_base_url": base_url,
                                         "llm_api_key": "k", "show_progress": False}, memory_options={})


def test_over_streamable_http(tmp_path):
    """The tools mounted as the HTTP app mounts them (a route at /mcp and the session manager in the
    app's lifespan: mcp_http), served by uvicorn on 127.0.0.1."""
    from starlette.applications import Starlette
    from starlette.routing import Route

    from hippo_engine.service.mcp_server import build_mcp, mcp_http

    with FakeOpenAIServer(responder=cite_first, max_requests=20) as srv:
        workspaces = _workspaces(tmp_path / "mem", srv.base_url)
        http = mcp_http(build_mcp(workspaces, wait_s=300))

        @contextlib.asynccontextmanager
        async def lifespan(app):
            async with http.lifespan():
                yield

        app = Starlette(routes=[Route("/mcp", http.endpoint, methods=["GET", "POST", "DELETE"])], lifespan=lifespan)
        try:
            with uvicorn_on_localhost(app) as url:
                async def main():
                    async with Client(f"{url}/mcp") as client:
                        return await the_sequence(client)
                out = anyio.run(main)
        finally:
            workspaces.close()
        assert len(srv.requests) == 1
    assert out["stats"]["workspace"] == "default"


def test_a_workspace_of_its_own(tmp_path):
    """--workspace: the tools work in that workspace; the folder's default workspace stays empty."""
    with FakeOpenAIServer(responder=cite_first, max_requests=5) as srv:
        workspaces = _workspaces(tmp_path / "mem", srv.base_url)
        try:
            from hippo_engine.service.mcp_server import build_mcp

            async def main():
                async with Client(build_mcp(workspaces, "notes", wait_s=300)) as c:
                    r = data(await c.call_tool("remember", {"texts": [DOCS["pike"]], "ids": ["pike"]}))
                    got = data(await c.call_tool("recall", {"query": QUESTIONS["pike"]}))
                async with Client(build_mcp(workspaces, wait_s=300)) as c:
                    empty = data(await c.call_tool("recall", {"query": QUESTIONS["pike"]}))
                return r, got, empty
            r, got, empty = anyio.run(main)
            assert r["status"] == "indexed" and got["passages"][0]["id"] == "pike"
            assert empty["passages"] == []
            assert {w["name"] for w in workspaces.list()} >= {"notes"}
        finally:
            workspaces.close()


def test_through_the_http_app_with_an_access_key(tmp_path):
    """``create_app`` (what ``hippo-engine serve`` runs) serves the tools at /mcp behind the access key:
    the acceptance sequence with the key in X-API-Key; without it, a 401 JSON error."""
    import httpx
    import httpx2  # the MCP SDK's HTTP client library
    from mcp.client.streamable_http import streamable_http_client

    from hippo_engine.service.app import create_app
    from hippo_engine.service.settings import ServiceSettings

    with FakeOpenAIServer(responder=cite_first, max_requests=20) as srv:
        opts = {"extractor": "ner", "llm_model_name": "m", "llm_base_url": srv.base_url, "llm_api_key": "k",
                "show_progress": False}
        app = create_app(ServiceSettings(save_dir=str(tmp_path / "mem"), rag_options=opts, access_key="s3cret"))
        with uvicorn_on_localhost(app) as url:
            refused = httpx.post(f"{url}/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                                 headers={"Accept": "application/json, text/event-stream"}, timeout=30)
            assert refused.status_code == 401 and "X-API-Key" in refused.json()["error"]["message"]

            async def main():
                async with httpx2.AsyncClient(headers={"X-API-Key": "s3cret"},
                                              timeout=httpx2.Timeout(30, read=300)) as http:
                    async with Client(streamable_http_client(f"{url}/mcp", http_client=http)) as client:
                        return await the_sequence(client)
            out = anyio.run(main)
        assert len(srv.requests) == 1
    assert out["stats"]["documents"]["indexed"] == 2


def test_the_servers_limits_hold_at_mcp_as_at_rest(tmp_path):
    """``create_app`` (what ``serve`` runs) with small limits: ``/mcp`` refuses exactly what the REST routes
    refuse (too many texts, too long a text or query, too large a top_k; over HTTP it took 1,500 texts and
    a 1.08 MB query), an unknown argument is refused by name, and calls within the limits work."""
    import httpx
    import httpx2  # the MCP SDK's HTTP client library
    from mcp.client.streamable_http import streamable_http_client

    from hippo_engine.service.app import create_app
    from hippo_engine.service.settings import ServiceSettings

    with FakeOpenAIServer(responder=cite_first, max_requests=5) as srv:
        opts = {"extractor": "ner", "llm_model_name": "m", "llm_base_url": srv.base_url, "llm_api_key": "k",
                "show_progress": False}
        settings = ServiceSettings(save_dir=str(tmp_path / "mem"), rag_options=opts, max_batch=3, max_query_chars=50,
                                   max_top_k=10, max_text_chars=120)
        with uvicorn_on_localhost(create_app(settings)) as url:
            rest = {"batch": httpx.post(f"{url}/documents", json={"documents": [{"text": "t"}] * 4}),
                    "text": httpx.post(f"{url}/documents", json={"documents": [{"text": "x" * 121}]}),
                    "query": httpx.post(f"{url}/retrieve", json={"query": "q" * 51}),
                    "top_k": httpx.post(f"{url}/retrieve", json={"query": "q", "top_k": 11})}
            assert {k: r.status_code for k, r in rest.items()} == {"batch": 413, "text": 422, "query": 422,
                                                                   "top_k": 422}, {k: r.text for k, r in rest.items()}

            async def main():
                async with httpx2.AsyncClient(timeout=httpx2.Timeout(30, read=300)) as http:
                    async with Client(streamable_http_client(f"{url}/mcp", http_client=http)) as client:
                        refused = {
                            "batch": await client.call_tool("remember", {"texts": ["t"] * 4, "wait": False}),
                            "text": await client.call_tool("remember", {"texts": ["x" * 121], "wait": False}),
                            "query": await client.call_tool("recall", {"query": "q" * 1_080_000}),
                            "top_k": await client.call_tool("recall", {"query": "q", "top_k": 11}),
                            "unknown": await client.call_tool("recall", {"query": "q", "top_n": 3})}
                        kept = data(await client.call_tool("remember", {"texts": list(DOCS.values()),
                                                                        "ids": list(DOCS)}))
                        found = data(await client.call_tool("recall", {"query": QUESTIONS["pike"], "top_k": 10}))
                        return refused, kept, found
            refused, kept, found = anyio.run(main)
    texts = {k: r.content[0].text for k, r in refused.items() if r.is_error}
    assert set(texts) == set(refused), refused
    assert "4 items in one call is over the limit of 3" in texts["batch"]
    assert "texts[0]: 121 characters long; the limit is 120" in texts["text"]
    assert "query: 1,080,000 characters long; the limit is 50" in texts["query"]
    assert "top_k: 11 is over the limit of 10" in texts["top_k"]
    assert "unknown argument(s) 'top_n'" in texts["unknown"]
    assert kept["status"] == "indexed" and kept["documents"] == list(DOCS)     # 3 texts: within the limit
    assert found["passages"][0]["id"] == "pike"
