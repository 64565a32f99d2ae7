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


def _run_asgi(app, messages, path="/documents"):
    """One POST straight into an ASGI app: the body ``messages``, then a client that sends nothing more."""
    import anyio
    sent, queue = [], list(messages)

    async def receive():
        if queue:
            return queue.pop(0)
        await anyio.sleep(60)               # the body stopped arriving
        return {"type": "http.disconnect"}

    async def send(message):
        sent.append(message)

    async def main():
        with anyio.fail_after(10):
            await app({"type": "http", "method": "POST", "path": path, "headers": [], "query_string": b""},
                      receive, send)
    anyio.run(main)
    return sent


def test_a_body_that_stops_arriving_is_a_408_and_a_complete_one_is_not_timed():
    """Issue 37 (7): the body timer (the real server's run: tests/service/integration/test_serve_edge.py)."""
    import json

    from hippo_engine.service.security import BodyTimer

    async def reads_all(scope, receive, send):
        while (await receive()).get("more_body"):
            pass
        await _ok_app(scope, receive, send)

    sent = _run_asgi(BodyTimer(reads_all, 0.2), [{"type": "http.request", "body": b"{", "more_body": True}])
    assert sent[0]["status"] == 408 and (b"connection", b"close") in sent[0]["headers"]
    assert json.loads(sent[1]["body"])["error"]["type"] == "timeout"

    async def waits_for_the_client_to_leave(scope, receive, send):
        await receive()                     # the whole body
        await _ok_app(scope, receive, send)
        assert (await receive())["type"] == "http.disconnect"     # not timed: a stream waits like this

    done = _run_asgi(BodyTimer(waits_for_the_client_to_leave, 0.2),
                     [{"type": "http.request", "body": b"{}", "more_body": False}, {"type": "http.disconnect"}])
    assert done[0]["status"] == 200


def test_the_connection_cap_is_at_most_half_the_descriptors():
    from hippo_engine.service.edge import connection_cap
    assert connection_cap(200, 1024) == 200 and connection_cap(200, 256) == 128 and connection_cap(200, 10) == 8
    assert connection_cap(5, 1024) == 8


def test_query_string_keys_are_redacted_and_the_rest_is_kept():
    from hippo_engine.service.logfilters import redact_query
    assert redact_query("/stats?API_KEY=s1&x-api-key=s2&key=s3&access-key=s4&%61pi_key=s5&top_k=3&q=key") == \
        "/stats?API_KEY=[redacted]&x-api-key=[redacted]&key=[redacted]&access-key=[redacted]&%61pi_key=[redacted]" \
        "&top_k=3&q=key"
    assert redact_query("/health") == "/health" and redact_query("/a?key") == "/a?key"


def test_a_flood_of_one_line_is_cut_to_one_per_interval_with_a_count():
    import logging

    from hippo_engine.service.logfilters import Throttle
    throttle = Throttle(("socket.accept() out of system resource",), interval=60)
    err = OSError(24, "Too many open files")

    def record(msg="socket.accept() out of system resource\nexception: ..."):
        return logging.LogRecord("asyncio", logging.ERROR, "f", 1, msg, None, (OSError, err, None))

    first = record()
    assert throttle.filter(first) and first.exc_info is None
    assert first.getMessage() == "socket.accept() out of system resource [Errno 24] Too many open files"
    assert not any(throttle.filter(record()) for _ in range(1000))
    assert throttle.filter(record("another line"))
    throttle.interval = 0
    again = record()
    assert throttle.filter(again) and "1000 more like it" in again.getMessage()
