"""The HTTP API's routes over a fake memory (tests/service/http_fakes.py): status codes, bodies, what
reaches the memory. The real memory behind real uvicorn: tests/service/integration/test_http_server.py."""
import pytest
from http_fakes import FakeWorkspaces, make_client

from hippo_engine.config import MODES
from hippo_engine.service import memory
from hippo_engine.service.schemas import MAX_TOP_K

DOCS = [{"id": "paris", "text": "Paris is the capital of France.", "title": "Paris", "metadata": {"lang": "en"}},
        {"id": "berlin", "text": "Berlin is the capital of Germany.", "metadata": {"lang": "de"}}]


def _add(client, docs=DOCS, prefix=""):
    r = client.post(f"{prefix}/documents", json={"documents": docs})
    assert r.status_code == 202, r.text
    return r.json()


def test_the_modes_and_top_k_of_the_schema_are_the_memorys(client):
    spec = client.get("/openapi.json").json()["components"]["schemas"]["RetrieveRequest"]["properties"]["mode"]
    assert next(a["enum"] for a in spec["anyOf"] if "enum" in a) == list(MODES)
    assert MAX_TOP_K == memory.MAX_TOP_K
    r = client.post("/retrieve", json={"query": "capital", "mode": "global"})
    assert r.status_code == 422 and "mode: must be one of hipporag2, naive, hi_local" in r.text
    modes = client.get("/modes").json()["modes"]
    assert [m["name"] for m in modes] == list(MODES) and modes[0]["explainable"] and not modes[1]["reads_context"]


def test_adding_documents_answers_202_with_a_job_that_reports_each_document(client, ws):
    body = _add(client, DOCS + [{"id": "bad", "text": "FAIL here"}])
    assert body["documents"] == ["paris", "berlin", "bad"]
    assert ws.memories[None].docs["paris"]["title"] == "Paris"
    assert ws.memories[None].docs["paris"]["metadata"] == {"lang": "en"}
    job = client.get(f"/jobs/{body['job_id']}").json()
    assert job["status"] == "failed" and job["progress"]["total"] == 3 and job["progress"]["failed"] == 1
    assert {d["id"]: d["status"] for d in job["documents"]} == {"paris": "indexed", "berlin": "indexed",
                                                              "bad": "failed"}
    assert client.get("/jobs/nope").status_code == 404


def test_documents_are_listed_by_status_and_page_and_read_one_by_one(client):
    _add(client, DOCS + [{"id": "bad", "text": "FAIL"}])
    page = client.get("/documents", params={"limit": 2}).json()
    assert page["total"] == 3 and len(page["documents"]) == 2 and page["limit"] == 2
    failed = client.get("/documents", params={"status": "failed"}).json()
    assert [d["id"] for d in failed["documents"]] == ["bad"] and failed["documents"][0]["error"]
    assert client.get("/documents", params={"status": "lost"}).status_code == 422
    assert client.get("/documents", params={"limit": 0}).status_code == 422
    doc = client.get("/documents/paris").json()
    assert doc["text"] == DOCS[0]["text"] and doc["status"] == "indexed"
    assert client.get("/documents/nope").json()["error"]["type"] == "not_found"


def test_an_id_with_a_slash_is_one_document(client):
    _add(client, [{"id": "notes/2024/a", "text": "a note"}])
    assert client.get("/documents/notes%2F2024%2Fa").json()["id"] == "notes/2024/a"
    assert client.delete("/documents/notes/2024/a").json()["deleted"] == ["notes/2024/a"]


def test_delete_one_is_404_when_unknown_and_a_batch_lists_the_unknown(client):
    _add(client)
    assert client.delete("/documents/paris").json() == {"deleted": ["paris"], "unknown": []}
    assert client.delete("/documents/paris").status_code == 404
    r = client.post("/documents/delete", json={"ids": ["berlin", "ghost", "berlin"]})
    assert r.json() == {"deleted": ["berlin"], "unknown": ["ghost"]}


def test_retry_requeues_the_failed_documents_or_says_there_were_none(client):
    _add(client, [{"id": "bad", "text": "FAIL once"}])
    r = client.post("/documents/retry")
    assert r.status_code == 202 and r.json()["documents"] == ["bad"]
    assert client.get("/documents/bad").json()["status"] == "indexed"
    r = client.post("/documents/retry")
    assert r.status_code == 200 and r.json() == {"job_id": None, "documents": []}


def test_retrieve_takes_one_query_or_a_batch_with_the_options(client, ws):
    _add(client)
    one = client.post("/retrieve", json={"query": "capital of France", "top_k": 1}).json()
    assert len(one["results"]) == 1 and one["results"][0]["passages"][0]["doc_ids"] == ["paris"]
    assert set(one["results"][0]["passages"][0]) >= {"id", "text", "score", "doc_ids"}
    assert "explanations" not in one["results"][0]
    many = client.post("/retrieve", json={"queries": ["France", "Germany"], "mode": "naive", "explain": True,
                                          "where": {"lang": "de"}}).json()
    assert [r["query"] for r in many["results"]] == ["France", "Germany"]
    assert many["results"][1]["passages"][0]["doc_ids"] == ["berlin"] and many["results"][1]["explanations"]
    assert ws.memories[None].calls[-1] == ("retrieve_args", ["France", "Germany"], 5, "naive", True, {"lang": "de"})


@pytest.mark.parametrize("body", [{}, {"query": "a", "queries": ["b"]}, {"queries": []}, {"query": "  "},
                                  {"query": "a", "mode": "nope"}, {"query": "a", "top_k": 0},
                                  {"query": "a", "topk": 3}, {"query": 3}])
def test_a_bad_retrieve_body_is_422_naming_the_problem(client, body):
    r = client.post("/retrieve", json=body)
    assert r.status_code == 422, r.text
    err = r.json()["error"]
    assert err["type"] == "validation_error" and err["message"].startswith("invalid request: ")


def test_answer_with_citations_by_question_or_query(client):
    _add(client)
    a = client.post("/answer", json={"question": "capital of Germany?"}).json()
    assert a["answer"] == "Berlin" and a["citations"][0]["doc_ids"] == ["berlin"] and a["passages"]
    assert client.post("/answer", json={"query": "capital of Germany?"}).json()["answer"] == "Berlin"
    assert client.post("/answer", json={"query": "x", "question": "y"}).status_code == 422


def test_explain_subgraph_and_stats(client):
    _add(client)
    e = client.post("/explain", json={"query": "France", "top": 1}).json()
    assert e["explanations"] == [{"passage_id": "chunk-paris", "query": "France"}]
    e = client.post("/explain", json={"query": "France", "passage_ids": ["chunk-berlin"]}).json()
    assert e["explanations"][0]["passage_id"] == "chunk-berlin"
    g = client.get("/subgraph", params={"query": "France", "limit": 1}).json()
    assert len(g["nodes"]) == 1 and g["edges"] == []
    assert client.get("/subgraph").status_code == 422
    assert client.get("/stats").json()["documents"]["indexed"] == 2


def test_explain_and_subgraph_take_top_k_like_retrieve_and_top_still(client, caplog):
    """One vocabulary (issue 39): ``top_k`` at /explain and /subgraph as at /retrieve; the old ``top`` is
    accepted with a deprecation warning in the log; both at once is a 422."""
    _add(client)
    assert client.post("/explain", json={"query": "France", "top_k": 1}).json()["explanations"] == \
        [{"passage_id": "chunk-paris", "query": "France"}]
    with caplog.at_level("WARNING"):
        old = client.post("/explain", json={"query": "France", "top": 1})
    assert old.status_code == 200 and len(old.json()["explanations"]) == 1
    assert client.post("/explain", json={"query": "France", "top": 1, "top_k": 1}).status_code == 422
    assert client.get("/subgraph", params={"query": "France", "top_k": 1}).status_code == 200
    assert client.get("/subgraph", params={"query": "France", "top": 1, "top_k": 1}).status_code == 422
    assert client.get("/health").json()["status"] == "ok"
    v = client.get("/version").json()
    assert v["version"] and v["api"] == "1"
    assert client.get("/w/some-space/health").json()["status"] == "ok"


def test_the_openapi_schema_lists_every_route_at_both_prefixes_and_the_docs_page_renders_it(client):
    spec = client.get("/openapi.json").json()
    paths = set(spec["paths"])
    for path in ("/documents", "/jobs/{job_id}", "/documents/{doc_id}", "/documents/delete", "/documents/retry",
                 "/retrieve", "/answer", "/explain", "/subgraph", "/stats", "/health", "/version"):
        assert path in paths and f"/w/{{workspace}}{path}" in paths
    assert {"/workspaces", "/workspaces/{name}"} <= paths
    page = client.get("/docs")
    assert page.status_code == 200 and "/w/{workspace}/retrieve" in page.text and "cdn" not in page.text.lower()


def test_workspace_routes_list_and_delete(client, ws):
    _add(client, prefix="/w/team-a")
    assert client.get("/workspaces").json() == {"workspaces": [{"name": "team-a", "documents": 2}]}
    assert client.delete("/workspaces/team-a").json() == {"deleted": "team-a"}
    assert client.delete("/workspaces/team-a").status_code == 404
    assert client.get("/w/team-a/documents").status_code == 404


def test_shutdown_closes_the_workspaces():
    ws = FakeWorkspaces()
    with make_client(ws) as c:
        c.get("/health")
        assert not ws.closed
    assert ws.closed


# ------------------------------------------------------------------ metadata and NUL at the door (issue 37)
def _nested(n: int) -> str:
    """JSON of an object whose values nest ``n`` deep: ``{"a":{"a":...1}}``."""
    return '{"a":' * n + "1" + "}" * n


def _post_raw(client, body: str):
    return client.post("/documents", content=body.encode(), headers={"Content-Type": "application/json"})


@pytest.mark.parametrize("depth", [33, 256, 500])
def test_metadata_nested_deeper_than_the_engine_takes_is_422_at_the_door(client, ws, depth):
    """The engine refuses metadata nested more than 32 deep when it indexes; the door says so at once
    (it answered 202, and from about 256 levels the stored metadata broke GET /documents)."""
    r = _post_raw(client, '{"documents":[{"id":"deep","text":"t","metadata":' + _nested(depth) + "}]}")
    assert r.status_code == 422, r.text
    assert r.json()["error"]["message"] == \
        "invalid request: body.documents[0].metadata: nested more than 32 levels deep (at most 32)"
    assert len(r.content) < 400 and ws.memories[None].calls == []


def test_metadata_as_deep_as_the_engine_takes_is_accepted_and_listed(client, ws):
    assert _post_raw(client, '{"documents":[{"id":"ok","text":"t","metadata":' + _nested(32) + "}]}").status_code \
        == 202
    assert client.get("/documents").status_code == 200 and client.get("/documents/ok").status_code == 200


def test_a_body_too_deep_for_the_parser_is_a_clean_400(client, ws):
    r = _post_raw(client, '{"documents":[{"text":"t","metadata":' + _nested(200_000) + "}]}")
    assert r.status_code == 400 and r.json()["error"]["type"] == "bad_request"
    assert ws.memories[None].calls == []


@pytest.mark.parametrize("metadata,message", [
    ({"k": "v\x00"}, "metadata['k']: text with a NUL character"),
    ({"k\x00": 1}, "NUL character"),
    ({"k": "\u00e9" * 40000}, "80,008 bytes of JSON; at most 65,536"),
    ({"": 1}, "keys must be non-empty strings"),
])
def test_metadata_the_index_cannot_store_is_422_at_the_door(client, ws, metadata, message):
    r = client.post("/documents", json={"documents": [{"text": "t", "metadata": metadata}]})
    assert r.status_code == 422 and message in r.json()["error"]["message"], r.text
    assert ws.memories[None].calls == []


def test_one_nul_in_a_text_or_an_id_is_refused(client, ws):
    """The text pattern let exactly one NUL through (``\\S`` matches NUL), the id pattern one control character."""
    for body in ({"documents": [{"text": "a\x00"}]}, {"documents": [{"text": "\x00"}]},
                 {"documents": [{"id": "x\x00", "text": "t"}]}, {"documents": [{"id": "\n", "text": "t"}]}):
        r = client.post("/documents", json=body)
        assert r.status_code == 422 and "NUL" in r.text, (body, r.text)
    assert client.post("/retrieve", json={"query": "\x00"}).status_code == 422
    r = client.post("/documents/delete", json={"ids": ["x\x00"]})
    assert r.status_code == 422 and "no control characters" in r.json()["error"]["message"]
    assert ws.memories[None].calls == []


@pytest.mark.parametrize("method,path", [("GET", "/documents/a%00b"), ("DELETE", "/documents/a%00b"),
                                         ("GET", "/jobs/a%00b"), ("GET", "/w/default/documents/%00"),
                                         ("DELETE", "/w/team/documents/x%01y"), ("GET", "/w/team/jobs/%00")])
def test_an_id_with_a_control_character_in_the_path_is_422_before_the_memory(client, ws, method, path):
    _add(client, prefix="/w/team")
    _add(client, prefix="/w/default")
    before = {name: list(m.calls) for name, m in ws.memories.items()}
    r = client.request(method, path)
    assert r.status_code == 422, r.text
    message = r.json()["error"]["message"]
    assert "no control characters" in message and "\\x1f" not in message      # said in words, not a regex
    assert {name: list(m.calls) for name, m in ws.memories.items()} == before


def test_deep_metadata_stored_by_an_older_version_is_listed_as_null_with_a_note(tmp_path):
    """Rows written before the door checked the depth: the listing and the document still answer 200
    (they answered 422 "Maximum serialization depth exceeded" from about 256 levels, 500 deeper)."""
    import sqlite3

    from helpers import make_rag

    from hippo_engine.service.memory import Memory

    ws = FakeWorkspaces()
    memory = ws.memories[None] = Memory(make_rag(tmp_path / "m"), worker=False)
    try:
        memory.add([{"id": "deep", "text": "one"}, {"id": "deeper", "text": "two"},
                    {"id": "fine", "text": "three", "metadata": {"k": [1, {"x": 2}]}}])
        with sqlite3.connect(memory.store.tables.path) as c:
            for doc_id, depth in (("deep", 300), ("deeper", 100_000)):
                c.execute("UPDATE service_documents SET metadata = ? WHERE doc_id = ?", (_nested(depth), doc_id))
        with make_client(ws) as client:
            for status in (None, "pending"):
                r = client.get("/documents", params={"status": status} if status else {})
                assert r.status_code == 200, r.text
                docs = {d["id"]: d for d in r.json()["documents"]}
                assert docs["fine"]["metadata"] == {"k": [1, {"x": 2}]} and "metadata_note" not in docs["fine"]
                for doc_id, depth in (("deep", 300), ("deeper", 100_000)):
                    assert docs[doc_id]["metadata"] is None
                    assert f"nests {depth} levels deep, more than the limit of 32" in docs[doc_id]["metadata_note"]
            one = client.get("/documents/deeper")
            assert one.status_code == 200 and one.json()["metadata"] is None and one.json()["text"] == "two"
    finally:
        memory.close()
