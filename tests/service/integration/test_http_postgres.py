"""``hippo-engine serve --dsn`` on PostgreSQL (the session's embedded server, tests/store/conftest.py):
the sample corpus added through the API and retrieved, two worker processes, and workspaces isolated
as schemas of their own."""
from __future__ import annotations

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
