"""The limits: body size (declared or streamed), documents per batch, queries per request, query
length, top_k. Each is 413 or 422 with a message naming the limit, and nothing reaches the memory;
each test fails if its check is removed."""
import pytest
from http_fakes import FakeWorkspaces, make_client

LIMITS = {"max_body_bytes": 2000, "max_batch": 3, "max_queries": 2, "max_query_chars": 50, "max_top_k": 10,
          "max_text_chars": 100}


@pytest.fixture
def ws():
    return FakeWorkspaces()


@pytest.fixture
def client(ws):
    with make_client(ws, **LIMITS) as c:
        yield c


def _error(r, status):
    assert r.status_code == status, r.text
    return r.json()["error"]["message"]


def test_a_declared_body_over_the_limit_is_413_before_anything_is_read(client, ws):
    msg = _error(client.post("/documents", json={"documents": [{"text": "x" * 3000}]}), 413)
    assert "2000 bytes" in msg
    assert ws.memories[None].calls == []


def test_a_streamed_body_is_counted_as_it_arrives(client, ws):
    def chunks():
        yield b'{"documents": [{"text": "'
        for _ in range(30):
            yield b"y" * 100
        yield b'"}]}'
    r = client.post("/documents", content=chunks(), headers={"Content-Type": "application/json"})
    assert "2000 bytes" in _error(r, 413)
    assert ws.memories[None].calls == []
    small = client.post("/documents", content=iter([b'{"documents": [{"text": "ok"}]}']),
                        headers={"Content-Type": "application/json"})
    assert small.status_code == 202


def test_a_bad_content_length_is_400(client):
    r = client.post("/retrieve", content=b"{}", headers={"Content-Length": "abc", "Content-Type": "application/json"})
    assert r.status_code == 400 and r.json()["error"]["message"] == "Content-Length is not a number"


def test_too_many_documents_in_one_batch_is_413(client, ws):
    docs = [{"text": f"d{i}"} for i in range(4)]
    assert "4 documents in one request is over the limit of 3" in _error(client.post("/documents",
                                                                                      json={"documents": docs}), 413)
    assert "4 ids" in _error(client.post("/documents/delete", json={"ids": ["a", "b", "c", "d"]}), 413)
    assert ws.memories[None].calls == []
    assert client.post("/documents", json={"documents": docs[:3]}).status_code == 202


def test_too_many_queries_is_413_and_too_long_a_query_is_422(client, ws):
    assert "3 queries" in _error(client.post("/retrieve", json={"queries": ["a", "b", "c"]}), 413)
    msg = _error(client.post("/retrieve", json={"queries": ["a", "q" * 51]}), 422)
    assert msg == "query 1 is 51 characters long; the limit is 50"
    assert "question is 51 characters" in _error(client.post("/answer", json={"question": "q" * 51}), 422)
    assert "query is 51" in _error(client.post("/explain", json={"query": "q" * 51}), 422)
    assert "query is 51" in _error(client.get("/subgraph", params={"query": "q" * 51}), 422)
    assert ws.memories[None].calls == []
    assert client.post("/retrieve", json={"queries": ["a", "q" * 50]}).status_code == 200


def test_too_large_a_top_k_is_422(client, ws):
    assert _error(client.post("/retrieve", json={"query": "a", "top_k": 11}), 422) == \
        "top_k 11 is over the limit of 10"
    assert "top 11" in _error(client.post("/explain", json={"query": "a", "top": 11}), 422)
    assert "top_k 11" in _error(client.post("/explain", json={"query": "a", "top_k": 11}), 422)
    assert "top_k 11" in _error(client.post("/answer", json={"query": "a", "top_k": 11, "stream": True}), 422)
    assert ws.memories[None].calls == []


def test_a_refused_write_to_a_new_workspace_creates_nothing(client, ws):
    r = client.post("/w/team/documents", json={"documents": [{"text": f"d{i}"} for i in range(4)]})
    assert r.status_code == 413
    assert client.post("/w/team/documents", json={"documents": [{"txt": "typo"}]}).status_code == 422
    assert "team" not in ws.memories and client.get("/w/team/stats").status_code == 404


def test_a_document_text_over_max_text_chars_is_422_naming_the_limit(client, ws):
    docs = [{"text": "ok"}, {"text": "x" * 101}]
    assert _error(client.post("/documents", json={"documents": docs}), 422) == \
        "documents[1].text is 101 characters long; the limit is 100"
    assert _error(client.post("/w/team/documents", json={"documents": docs[1:]}), 422).startswith("documents[0]")
    assert ws.memories[None].calls == [] and "team" not in ws.memories
    assert client.post("/documents", json={"documents": [{"text": "x" * 100}]}).status_code == 202


def test_the_limits_view_is_the_settings():
    from hippo_engine.service.limits import Limits
    from hippo_engine.service.settings import ServiceSettings
    settings = ServiceSettings(save_dir="x", **LIMITS)
    assert Limits.of(settings) == Limits(max_batch=3, max_queries=2, max_query_chars=50, max_top_k=10,
                                         max_text_chars=100)
    with pytest.raises(ValueError, match="max_text_chars"):
        Limits(max_text_chars=0)
