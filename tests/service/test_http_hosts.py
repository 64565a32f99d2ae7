"""Issue 37 (1, 8): the Host check on every route (REST, the web page's files, /docs, /openapi.json,
/health and /mcp) against DNS rebinding, and the Origin check of the requests that may change something
and of /mcp; refusals are the service's JSON errors. Over the fake memory; the real server with the
official MCP client is in tests/service/integration/test_serve_edge.py."""
import re
import socket

import pytest
from http_fakes import FakeWorkspaces, make_client
from starlette.testclient import TestClient
from test_http_mounts import INIT, MCP_HEADERS, _mcp_result

FOREIGN = "rebind.attacker.example:8103"


def _operations(client):
    """Every (method, concrete path) of the OpenAPI schema, path parameters filled in."""
    for path, item in client.get("/openapi.json").json()["paths"].items():
        concrete = re.sub(r"\{workspace\}", "team", path)
        concrete = re.sub(r"\{[a-z_]+\}", "x1", concrete)
        for method in item:
            yield method.upper(), concrete


@pytest.fixture
def full():
    with make_client(FakeWorkspaces(), mount_mcp=True, mount_web=True) as c:
        yield c


def _refused(r, status=400):
    assert r.status_code == status, r.text
    assert r.json()["error"]["type"] == ("bad_request" if status == 400 else "forbidden")
    return r.json()["error"]["message"]


def test_a_foreign_host_is_refused_on_every_route_mcp_and_the_page_included(full):
    ops = list(_operations(full)) + [("GET", p) for p in ("/", "/index.html", "/docs", "/openapi.json", "/health",
                                                           "/w/team/health", "/nope")]
    assert len(ops) > 25
    for method, path in ops:
        msg = _refused(full.request(method, path, headers={"Host": FOREIGN}, json={"query": "a"}))
        assert "--allowed-hosts" in msg and "rebind.attacker.example" in msg
    _refused(full.post("/mcp", json=INIT, headers={**MCP_HEADERS, "Host": FOREIGN}))
    _refused(full.get("/mcp", headers={"Host": FOREIGN, "Accept": "text/event-stream"}))
    assert full.post("/documents", json={"documents": [{"id": "secret", "text": "t"}]}).status_code == 202
    assert full.get("/documents/secret", headers={"Host": "rebind.attacker.example"}).status_code == 400


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.1:8000", "localhost", "LOCALHOST:1", "localhost.:80",
                                  "[::1]", "[::1]:8000", "127.5.6.7:9"])
def test_the_loopback_names_are_accepted_with_or_without_a_port(full, host):
    assert full.get("/stats", headers={"Host": host}).status_code == 200
    assert full.get("/", headers={"Host": host}).status_code == 200


def test_mcp_answers_whatever_loopback_name_or_allowed_name_the_host_has():
    """The SDK's own check (421 plain text) is off: a Host it did not know, without a port, is served."""
    with make_client(FakeWorkspaces(), mount_mcp=True, host="127.0.0.2", allowed_hosts=("memory.example",)) as c:
        for host in ("127.0.0.2:8000", "localhost", "memory.example", "memory.example:80"):
            assert _mcp_result(c.post("/mcp", json=INIT, headers={**MCP_HEADERS, "Host": host}))["result"]
        _refused(c.post("/mcp", json=INIT, headers={**MCP_HEADERS, "Host": "other.example"}))


def test_allowed_hosts_names_with_and_without_a_port_and_the_star():
    with make_client(allowed_hosts=("Memory.Example", "proxy.example:8443")) as c:
        for host in ("memory.example", "memory.example:1234", "proxy.example:8443"):
            assert c.get("/stats", headers={"Host": host}).status_code == 200, host
        for host in ("proxy.example", "proxy.example:1", "example", "memory.example.evil", "", "a b", "x:y"):
            _refused(c.get("/stats", headers={"Host": host}))
    with make_client(allowed_hosts=("*",)) as c:
        assert c.get("/stats", headers={"Host": FOREIGN}).status_code == 200


def test_the_bound_address_and_a_wildcard_bind():
    with make_client(host="192.168.1.5") as c:
        assert c.get("/stats", headers={"Host": "192.168.1.5:8000"}).status_code == 200
        assert c.get("/stats", headers={"Host": "localhost:8000"}).status_code == 200
        _refused(c.get("/stats", headers={"Host": "10.0.0.1:8000"}))
    with make_client(host="0.0.0.0") as c:      # any address (none can be rebound) and the machine's name
        for host in ("10.0.0.1:8000", "[fe80::1]:8000", socket.gethostname(), "localhost"):
            assert c.get("/stats", headers={"Host": host}).status_code == 200, host
        _refused(c.get("/stats", headers={"Host": FOREIGN}))


async def _ok(scope, receive, send):
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})


def _raw(policy, headers):
    """One request straight into the guard (a TestClient always sends one Host)."""
    from hippo_engine.service.hosts import HostGuard
    sent = []

    async def receive():
        return {"type": "http.request", "body": b""}

    async def send(message):
        sent.append(message)

    import anyio
    scope = {"type": "http", "method": "GET", "path": "/health", "headers": headers, "query_string": b""}
    anyio.run(HostGuard(_ok, policy), scope, receive, send)
    return sent[0]["status"]


def test_no_host_or_two_hosts_are_refused_unless_any_host_is_allowed():
    from hippo_engine.service.hosts import HostPolicy
    strict, star = HostPolicy.build("127.0.0.1"), HostPolicy.build("127.0.0.1", ["*"])
    assert _raw(strict, []) == 400 and _raw(star, []) == 200
    assert _raw(strict, [(b"host", b"127.0.0.1"), (b"host", b"evil.example")]) == 400
    assert _raw(strict, [(b"host", b"127.0.0.1")]) == 200


def test_a_foreign_origin_cannot_change_anything_or_reach_mcp(full):
    evil = {"Origin": "http://evil.example"}
    body = {"documents": [{"id": "d", "text": "t"}]}
    assert "--cors-origin" in _refused(full.post("/documents", json=body, headers=evil), 403)
    _refused(full.delete("/documents/d", headers=evil), 403)
    _refused(full.post("/w/team/documents/delete", json={"ids": ["d"]}, headers=evil), 403)
    _refused(full.post("/mcp", json=INIT, headers={**MCP_HEADERS, **evil}), 403)
    _refused(full.get("/mcp", headers={"Accept": "text/event-stream", **evil}), 403)
    _refused(full.post("/documents", json=body, headers={"Origin": "null"}), 403)
    _refused(full.post("/documents", json=body, headers={"Origin": "http://127.0.0.1:9999"}), 403)  # another app
    assert full.get("/stats", headers=evil).status_code == 200          # reading: the browser's CORS decides
    same = {"Origin": "http://127.0.0.1:8000"}                          # the web page of this server
    assert full.post("/documents", json=body, headers=same).status_code == 202
    assert _mcp_result(full.post("/mcp", json=INIT, headers={**MCP_HEADERS, **same}))["result"]
    assert full.post("/documents", json=body).status_code == 202        # no Origin: not a browser page


def test_cors_origins_and_allowed_host_names_may_send_requests():
    body = {"documents": [{"text": "t"}]}
    with make_client(cors_origins=("http://app.example:3000",), allowed_hosts=("memory.example",)) as c:
        assert c.post("/documents", json=body, headers={"Origin": "http://app.example:3000"}).status_code == 202
        assert c.post("/documents", json=body, headers={"Origin": "https://memory.example"}).status_code == 202
        _refused(c.post("/documents", json=body, headers={"Origin": "http://app.example:3001"}), 403)
        pre = c.options("/documents", headers={"Origin": "http://app.example:3000",
                                                "Access-Control-Request-Method": "POST"})
        assert pre.status_code == 200
        _refused(c.options("/documents", headers={"Origin": "http://evil.example",
                                                   "Access-Control-Request-Method": "POST"}), 403)
    with make_client(allowed_hosts=("*",)) as c:                        # '*' is about Host only
        _refused(c.post("/documents", json=body, headers={"Origin": "http://evil.example"}), 403)


def test_a_proxy_ending_tls_keeps_the_same_origin():
    from hippo_engine.service.hosts import HostPolicy
    policy = HostPolicy.build("127.0.0.1")
    assert policy.origin_ok("https://127.0.0.1", "127.0.0.1")
    assert policy.origin_ok("http://localhost:8000", "localhost:8000")
    assert not policy.origin_ok("http://localhost:8000", "localhost:8001")
    assert not policy.origin_ok("http://user@localhost:8000", "localhost:8000")
    assert not policy.origin_ok("file://", "localhost:8000")


def test_split_host_and_bad_allowed_hosts():
    from hippo_engine.service.hosts import HostPolicy, split_host
    assert split_host("Example.ORG.:8080") == ("example.org", 8080)
    assert split_host("[::1]:80") == ("::1", 80) and split_host("::1") == ("::1", None)
    for bad in ("", ":80", "a:b", "a:99999", "[::1", "[::1]x", "a/b", "u@h"):
        assert split_host(bad) is None, bad
    with pytest.raises(ValueError, match="allowed-hosts"):
        HostPolicy.build("127.0.0.1", ["http://x"])


def test_a_raw_client_without_the_default_host_is_refused():
    """TestClient's own default Host (testserver) is not a name of this server."""
    from hippo_engine.service.app import create_app
    from hippo_engine.service.settings import ServiceSettings
    app = create_app(ServiceSettings("unused", mount_mcp=False, mount_web=False), workspaces=FakeWorkspaces())
    with TestClient(app) as c:
        _refused(c.get("/health"))
