"""``hippo-engine serve --dsn`` on PostgreSQL (the session's embedded server, tests/store/conftest.py):
the sample corpus added through the API and retrieved, two worker processes, and workspaces isolated
as schemas of their own."""
from __future__ import annotations

import json

import pytest
from store import conftest as pg_fixtures
from test_http_server import DOCS, QUESTIONS, Serve, add_and_wait

pytest.importorskip("uvicorn", reason="the server extra")

from reproduce.citations_server import ScriptedReaderServer  # noqa: E402

pg_server, pg_dsn = pg_fixtures.pg_server, pg_fixtures.pg_dsn


def _schemas(dsn: str) -> set[str]:
    import psycopg
    with psycopg.connect(dsn, autocommit=True) as c:
        return {r[0] for r in c.execute("SELECT nspname FROM pg_namespace WHERE nspname LIKE 'hippo%'")}


def test_serve_on_postgres_with_two_workers_and_a_workspace(tmp_path, pg_dsn):
    before = _schemas(pg_dsn)
    with ScriptedReaderServer({q["question"]: q["answers"] for q in QUESTIONS}) as llm:
        srv = Serve(tmp_path / "memory", llm.base_url, "--dsn", pg_dsn, "--workers", "2")
        try:
            c = srv.client
            job = add_and_wait(c, DOCS)
            assert job["status"] == "done" and job["progress"]["indexed"] == len(DOCS), job
            stats = c.get("/stats").json()
            assert stats["storage"]["backend"] == "postgres" and stats["graph"]["passage_nodes"] == len(DOCS)
            hits = c.post("/retrieve", json={"query": QUESTIONS[0]["question"], "top_k": 3}).json()
            assert hits["results"][0]["passages"][0]["doc_ids"] == ["sample-0"]
            note = {"id": "pg-note", "text": "The Quillon Vault lies beneath the harbour of Maresk."}
            assert add_and_wait(c, [note], prefix="/w/team-pg")["status"] == "done"
            query = {"query": "Where is the Quillon Vault?", "top_k": 3}
            assert c.post("/w/team-pg/retrieve", json=query).json()["results"][0]["passages"][0]["doc_ids"] == \
                ["pg-note"]
            assert all("pg-note" not in p["doc_ids"]
                       for p in c.post("/retrieve", json=query).json()["results"][0]["passages"])
            new = _schemas(pg_dsn) - before
            assert len(new) == 2 and any(n.startswith("hippo_team_pg_") for n in new), new   # default's, team-pg's
            fresh = {"Connection": "close"}         # a new connection each time: either worker may answer
            assert {c.get("/w/team-pg/stats", headers=fresh).status_code for _ in range(12)} == {200}
            assert c.delete("/workspaces/team-pg").status_code == 200
            assert not any(n.startswith("hippo_team_pg_") for n in _schemas(pg_dsn))
            statuses = [c.get("/w/team-pg/stats", headers=fresh).status_code for _ in range(12)]
            assert set(statuses) == {404}, statuses
        finally:
            srv.stop()


def _nested(n: int) -> str:
    """JSON of an object whose values nest ``n`` deep."""
    return '{"a":' * n + "1" + "}" * n


def test_nul_ids_and_deep_metadata_on_postgres(tmp_path, pg_dsn):
    """Issue 37 items 6 and 9 on PostgreSQL: ids with a NUL in a path or a body are refused (422, as on
    SQLite; they were 500s with a traceback and a closed connection), metadata nested deeper than the
    engine takes is refused at the door, and metadata stored deeper by an older version leaves the
    listing working. The job store itself never sends a NUL id to the database."""
    from hippo_engine.service.jobstore import JobStore
    from hippo_engine.store.postgres.jobs import PostgresJobTables

    before = _schemas(pg_dsn)
    with ScriptedReaderServer({q["question"]: q["answers"] for q in QUESTIONS}) as llm:
        srv = Serve(tmp_path / "memory", llm.base_url, "--dsn", pg_dsn)
        try:
            c = srv.client
            ok = add_and_wait(c, [{"id": "fine", "text": DOCS[0]["text"], "metadata": json.loads(_nested(32))},
                                  {"id": "old", "text": DOCS[1]["text"]}])
            assert ok["status"] == "done" and ok["progress"]["indexed"] == 2, ok
            refused = [c.get("/documents/a%00b"), c.delete("/documents/a%00b"), c.get("/jobs/a%00b"),
                       c.get("/w/default/documents/%00"), c.post("/documents/delete", json={"ids": ["x\x00"]}),
                       c.post("/documents", json={"documents": [{"text": "one NUL\x00"}]}),
                       c.post("/documents", json={"documents": [{"text": "t", "metadata": {"k": "\x00"}}]}),
                       c.post("/documents", content=b'{"documents":[{"text":"t","metadata":' + _nested(33).encode()
                              + b"}]}", headers={"Content-Type": "application/json"})]
            assert [r.status_code for r in refused] == [422] * len(refused), [r.text for r in refused]
            assert c.get("/documents/fine").json()["metadata"] == json.loads(_nested(32))
            (schema,) = _schemas(pg_dsn) - before
            store = JobStore(PostgresJobTables(pg_dsn, schema))
            try:
                assert store.document("a\x00b") is None and store.job("a\x00b") is None
                assert store.statuses(["fine", "x\x00"]) == {"fine": "indexed"} and store.unpurged(["x\x00"]) == []
                with pytest.raises(ValueError, match="NUL"):
                    store.delete(["fine", "x\x00"])
                with store.tables.write() as w:          # rows written by an older version, which took any depth
                    for doc_id, depth in (("fine", 300), ("old", 100_000)):
                        w.execute(f'UPDATE "{schema}".service_documents SET metadata = %s WHERE doc_id = %s',
                                  (_nested(depth), doc_id))
                    # an indexed document's listed metadata is the index's (issue 39: one document list)
                    w.execute(f'UPDATE "{schema}".document_metadata SET metadata = %s WHERE doc_id = %s',
                              (_nested(300), "fine"))
            finally:
                store.close()
            page = c.get("/documents")
            assert page.status_code == 200, page.text
            shown = {d["id"]: d for d in page.json()["documents"]}
            assert shown["fine"]["metadata"] is None and "300 levels deep" in shown["fine"]["metadata_note"]
            assert shown["old"]["metadata"] is None and "100000 levels deep" in shown["old"]["metadata_note"]
            assert c.get("/documents/old").status_code == 200
            assert c.get("/health").status_code == 200
        finally:
            srv.stop()
    assert "Traceback" not in srv.output(), srv.output()[-3000:]


def test_a_foreign_host_gets_400_on_rest_and_mcp_on_postgres(tmp_path, pg_dsn):
    """Issue 37 (1, 8): DNS rebinding is refused on PostgreSQL as on SQLite: 400 JSON on REST and /mcp."""
    foreign = {"Host": "rebind.attacker.example:8103"}
    with ScriptedReaderServer({}) as llm:
        srv = Serve(tmp_path / "memory", llm.base_url, "--dsn", pg_dsn)
        try:
            c = srv.client
            assert c.post("/documents", json={"documents": [{"id": "secret", "text": "a secret"}]}).status_code == 202
            for method, path in (("GET", "/documents/secret"), ("DELETE", "/documents/secret"), ("GET", "/stats"),
                                 ("GET", "/health"), ("POST", "/documents")):
                r = c.request(method, path, headers=foreign, json={"documents": [{"text": "x"}]})
                assert r.status_code == 400 and r.json()["error"]["type"] == "bad_request", (method, path, r.text)
            r = c.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                       headers={**foreign, "Accept": "application/json, text/event-stream"})
            assert r.status_code == 400 and r.json()["error"]["type"] == "bad_request", r.text
            assert c.get("/documents/secret").status_code == 200
        finally:
            srv.stop()
