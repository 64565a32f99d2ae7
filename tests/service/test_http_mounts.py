"""The MCP server at /mcp and the web page at / inside the HTTP app (over the fake memory)."""
import json

from http_fakes import FakeWorkspaces, make_client

from hippo_engine.service.security import KEY_HEADER
from hippo_engine.service.web import FILES

INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "test", "version": "1"}}}
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


def _mcp_result(r):
    assert r.status_code == 200, r.text
    if r.headers["content-type"].startswith("text/event-stream"):
        data = [ln.removeprefix("data: ") for ln in r.text.splitlines() if ln.startswith("data: ")]
        return json.loads(data[-1])
    return r.json()


def test_mcp_answers_at_mcp_and_lists_the_memory_tools():
    with make_client(FakeWorkspaces(), mount_mcp=True) as c:
        init = _mcp_result(c.post("/mcp", json=INIT, headers=MCP_HEADERS))
        assert init["result"]["serverInfo"]["name"]
        tools = _mcp_result(c.post("/mcp", json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
                                   headers=MCP_HEADERS))
        names = {t["name"] for t in tools["result"]["tools"]}
        assert {"remember", "recall", "answer", "forget", "memory_stats"} <= names


def test_mcp_needs_the_access_key_when_one_is_set():
    with make_client(FakeWorkspaces(), mount_mcp=True, access_key="k") as c:
        r = c.post("/mcp", json=INIT, headers=MCP_HEADERS)
        assert r.status_code == 401 and r.json()["error"]["type"] == "unauthorized"
        assert _mcp_result(c.post("/mcp", json=INIT, headers={**MCP_HEADERS, KEY_HEADER: "k"}))["result"]


def test_the_web_page_and_its_files_are_served_without_the_key_and_nothing_else_is():
    with make_client(FakeWorkspaces(), mount_web=True, access_key="k") as c:
        page = c.get("/")
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        for name in FILES:
            assert c.get(f"/{name}").status_code == 200, name
        assert c.get("/__init__.py").status_code == 401      # not a page file: behind the key, and absent
        assert c.get("/__init__.py", headers={KEY_HEADER: "k"}).status_code == 404
        assert c.get("/stats").status_code == 401
        assert c.get("/openapi.json").status_code == 200 and c.get("/docs").status_code == 200


def test_cors_is_off_unless_origins_are_given():
    origin = {"Origin": "http://127.0.0.1:3000"}
    with make_client() as c:
        assert "access-control-allow-origin" not in c.get("/health", headers=origin).headers
    with make_client(cors_origins=("http://127.0.0.1:3000",), access_key="k") as c:
        assert c.get("/health", headers=origin).headers["access-control-allow-origin"] == "http://127.0.0.1:3000"
        pre = c.options("/retrieve", headers={**origin, "Access-Control-Request-Method": "POST",
                                              "Access-Control-Request-Headers": "x-api-key,content-type"})
        assert pre.status_code == 200 and "x-api-key" in pre.headers["access-control-allow-headers"].lower()
        other = c.get("/health", headers={"Origin": "http://evil.example"})
        assert "access-control-allow-origin" not in other.headers
