"""The access key: with one set, every route but health needs X-API-Key (401 JSON otherwise), before
the body is read; without one, no route asks for it. Each test fails if its check is removed."""
import re

import pytest
from http_fakes import FakeWorkspaces, make_client

from hippo_engine.service.security import KEY_HEADER, BodyLimit, KeyGuard, key_matches

KEY = "s3cret-ключ"      # not ASCII: compared as UTF-8 bytes


def _operations(client):
    """Every (method, concrete path) of the OpenAPI schema, path parameters filled in."""
    spec = client.get("/openapi.json").json()
    for path, item in spec["paths"].items():
        concrete = re.sub(r"\{workspace\}", "team", path)
        concrete = re.sub(r"\{[a-z_]+\}", "x1", concrete)
        for method in item:
            yield method.upper(), concrete, path


def _body(method, path):
    if method != "POST":
        return None
    if path.endswith("/documents"):
        return {"documents": [{"text": "a"}]}
    if path.endswith("/documents/delete"):
        return {"ids": ["a"]}
    return {"query": "a"}


@pytest.fixture
def locked():
    with make_client(FakeWorkspaces(), access_key=KEY) as c:
        yield c


def test_every_route_but_health_refuses_a_request_without_the_key(locked):
    ops = list(_operations(locked))
    assert len(ops) > 20
    for method, path, template in ops:
        for headers in ({}, {KEY_HEADER: "wrong"}, {KEY_HEADER: KEY[:-1].encode()}):
            r = locked.request(method, path, json=_body(method, template), headers=headers)
            if template.endswith("/health"):
                assert r.status_code == 200, (method, path)
                continue
            assert r.status_code == 401, (method, path, headers, r.text)
            assert r.json()["error"]["type"] == "unauthorized" and KEY_HEADER in r.json()["error"]["message"]


def test_with_the_key_every_route_answers(locked):
    raw = {KEY_HEADER: KEY.encode("utf-8")}    # what a client puts on the wire
    locked.post("/w/team/documents", json={"documents": [{"id": "x1", "text": "a"}]}, headers=raw)
    for method, path, template in _operations(locked):
        r = locked.request(method, path, json=_body(method, template), headers=raw)
        assert r.status_code != 401 and r.status_code < 500, (method, path, r.text)


def test_the_key_is_checked_before_the_body():
    """A request without the key gets 401 even with a body that is malformed or too large."""
    with make_client(FakeWorkspaces(), access_key=KEY, max_body_bytes=100) as c:
        bad = c.post("/retrieve", content=b"{not json", headers={"Content-Type": "application/json"})
        big = c.post("/documents", json={"documents": [{"text": "x" * 500}]})
        assert bad.status_code == 401 and big.status_code == 401


def test_the_openapi_schema_declares_the_key_only_when_one_is_set(locked):
    spec = locked.get("/openapi.json").json()
    assert spec["components"]["securitySchemes"]["AccessKey"] == {
        "type": "apiKey", "in": "header", "name": KEY_HEADER,
        "description": "the server's access key (`hippo-engine serve --access-key`)"}
    assert spec["paths"]["/retrieve"]["post"]["security"] == [{"AccessKey": []}]
    assert "security" not in spec["paths"]["/health"]["get"]
    with make_client() as open_client:
        spec = open_client.get("/openapi.json").json()
        assert "securitySchemes" not in spec.get("components", {})
        assert open_client.get("/stats").status_code == 200


def test_the_routes_check_the_key_even_behind_another_front():
    """The dependency on the API routes is a second check: without the middleware the routes still refuse."""
    with make_client(FakeWorkspaces(), access_key=KEY) as c:
        app = c.app
        inner = app.middleware_stack
        while not isinstance(inner, KeyGuard):
            inner = inner.app
        inner.is_open = lambda path: True          # the middleware lets everything through
        assert c.get("/stats").status_code == 401
        assert c.get("/stats", headers={KEY_HEADER: KEY.encode()}).status_code == 200


def test_key_matches_compares_raw_bytes():
    assert key_matches(KEY.encode("utf-8"), KEY)
    assert not key_matches(KEY, KEY)                    # the str a server decodes as latin-1 is not these bytes
    assert not key_matches(None, KEY) and not key_matches(b"", KEY)


async def _ok_app(scope, receive, send):
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})


def test_the_guard_covers_mounted_apps_like_mcp():
    from starlette.testclient import TestClient
    guarded = TestClient(BodyLimit(KeyGuard(_ok_app, "k", lambda p: p == "/health"), 10))
    assert guarded.post("/mcp").status_code == 401
    assert guarded.post("/mcp", headers={KEY_HEADER: "k"}).text == "ok"
    assert guarded.get("/health").text == "ok"
