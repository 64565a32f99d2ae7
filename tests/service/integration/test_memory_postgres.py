"""Memory and Workspaces on PostgreSQL (the session's embedded server, fake models): the job tables in the
index's schema, two worker processes over one index claiming disjoint batches, workspaces as schemas
(isolated, dropped on delete), and named workspaces on the default workspace's embedded server."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from fakes import NgramEncoder, ScriptedLLM
from helpers import CORPUS, assert_same, make_rag, snapshot, toy_respond
from store import conftest as pg_fixtures
from test_memory_kill import corpus

from hippo_engine.service.jobs import indexed_text
from hippo_engine.service.memory import Memory
from hippo_engine.service.workspaces import Workspaces
from hippo_engine.store.postgres.jobs import PostgresJobTables

CHILD = Path(__file__).with_name("ingest_child.py")
# the storage tests' PostgreSQL fixtures (one embedded server per session, a fresh schema per test)
pg_server, pg_dsn, pg_schema, pg_dirs = (pg_fixtures.pg_server, pg_fixtures.pg_dsn, pg_fixtures.pg_schema,
                                         pg_fixtures.pg_dirs)


def _schemas(dsn: str) -> set[str]:
    import psycopg
    with psycopg.connect(dsn, autocommit=True) as c:
        return {r[0] for r in c.execute("SELECT nspname FROM pg_namespace")}


def _tables(dsn: str, schema: str) -> set[str]:
    import psycopg
    with psycopg.connect(dsn, autocommit=True) as c:
        return {r[0] for r in c.execute("SELECT tablename FROM pg_tables WHERE schemaname = %s", (schema,))}


def test_the_queue_lives_in_the_index_schema_and_works_as_on_sqlite(tmp_path, pg_dsn, pg_schema):
    rag = make_rag(tmp_path / "m", storage="postgres", dsn=pg_dsn, postgres_schema=pg_schema, use_filter=False)
    mem = Memory(rag, batch_size=3, poll_s=0.05)
    try:
        assert isinstance(mem.store.tables, PostgresJobTables) and mem.store.tables.schema == pg_schema
        assert {"service_jobs", "service_documents", "service_job_items", "meta"} <= _tables(pg_dsn, pg_schema)
        job = mem.add([{"id": f"d{i}", "text": t, "metadata": {"i": i}} for i, t in enumerate(CORPUS)])
        assert mem.wait(job["job_id"], timeout=120)
        assert mem.job(job["job_id"])["progress"]["indexed"] == len(CORPUS)
        assert mem.documents(status="indexed", offset=6, limit=5)["documents"][0]["id"] == "d6"
        assert mem.delete(["d1", "nope"]) == {"deleted": ["d1"], "unknown": ["nope"]}
        mem.add([{"id": "d2", "text": CORPUS[2] + " Again."}, {"id": "new", "text": "A new document."}])
        assert mem.wait(timeout=120)                 # no metadata given: d2 keeps its own, a new id has none
        assert rag.document_metadata(["d2", "new"]) == {"d2": {"i": 2}, "new": {}}
        assert mem.document("d2")["metadata"] == {"i": 2}
        assert "d1" not in rag.index_state.all_documents()
        assert mem.retrieve(["Who founded Tamsin College?"], top_k=2)[0]["passages"]
        assert mem.stats()["storage"]["backend"] == "postgres"
    finally:
        mem.close()


def test_two_worker_processes_over_one_index_claim_disjoint_batches(tmp_path, pg_dsn, pg_schema):
    docs = corpus(36)
    docs_file = tmp_path / "docs.json"
    docs_file.write_text(json.dumps(docs))
    save = tmp_path / "m"
    opts = {"storage": "postgres", "dsn": pg_dsn, "postgres_schema": pg_schema, "use_filter": False}
    mem = Memory(make_rag(save, **opts), worker=False)
    mem.add(docs)
    mem.close()
    args = [sys.executable, str(CHILD), str(save), str(docs_file), "--batch-size", "2", "--no-add", "--print-batches",
            "--storage", "postgres", "--dsn", pg_dsn, "--schema", pg_schema]
    procs = [subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [e[-2000:] for _, e in outs]
    batches = [[ids for line in out.splitlines() if line.startswith("batch ")
                for ids in line.split(" ", 1)[1].split(",")] for out, _ in outs]
    assert all(batches), "each process indexed some batches"
    assert not set(batches[0]) & set(batches[1])                       # no document claimed by both
    assert sorted(batches[0] + batches[1]) == sorted(d["id"] for d in docs)
    mem = Memory(make_rag(save, **opts), worker=False)
    clean = make_rag(tmp_path / "clean", use_filter=False)
    try:
        assert mem.store.counts() == {"pending": 0, "processing": 0, "indexed": len(docs), "failed": 0}
        clean.index([indexed_text(d["text"], d["title"]) for d in docs], ids=[d["id"] for d in docs])
        assert_same(snapshot(mem.rag), snapshot(clean))
    finally:
        mem.close()
        clean.close()


def _options(**kw) -> dict:
    return {"llm": ScriptedLLM(toy_respond), "encoder": NgramEncoder(), "show_progress": False,
            "synonymy_threshold": 0.6, "use_filter": False, **kw}


def test_workspaces_on_a_server_are_schemas_of_their_own_dropped_on_delete(tmp_path, pg_dsn):
    ws = Workspaces(tmp_path / "root", rag_options=_options(dsn=pg_dsn), memory_options={"poll_s": 0.05})
    made = []
    try:
        a, b = ws.get("alpha", create=True), ws.get("beta", create=True)
        made = [m.rag.index_state.db.schema for m in (a, b, ws.get(None, create=True))]
        assert len(set(made)) == 3 and made[0].startswith("hippo_alpha_")
        a.add([{"id": "x", "text": CORPUS[0]}])
        b.add([{"id": "y", "text": CORPUS[1]}])
        assert a.wait(timeout=120) and b.wait(timeout=120)
        assert b.document("x") is None and a.document("y") is None
        assert [p["doc_ids"] for p in b.retrieve(["Lake Veloria"], top_k=5)[0]["passages"]] == [["y"]]
        assert ws.delete("alpha")
        assert made[0] not in _schemas(pg_dsn) and made[1] in _schemas(pg_dsn)
        assert [w["name"] for w in ws.list()] == ["default", "beta"]
    finally:
        ws.close()
        import psycopg
        with psycopg.connect(pg_dsn, autocommit=True) as c:
            for s in made:
                c.execute(f'DROP SCHEMA IF EXISTS "{s}" CASCADE')


@pytest.mark.timeout(300)
def test_named_workspaces_share_the_default_workspaces_embedded_server(pg_dirs):
    root = pg_dirs() / "root"
    ws = Workspaces(root, rag_options=_options(storage="postgres"), memory_options={"poll_s": 0.05})
    try:
        d, a = ws.get(None, create=True), ws.get("alpha", create=True)
        assert d.rag.index_state.db.schema == "hippo" and a.rag.index_state.db.schema.startswith("hippo_alpha_")
        assert not (root / "workspaces" / "alpha" / "postgres").exists()       # no server of its own
        a.add([{"id": "x", "text": CORPUS[2]}])
        assert a.wait(timeout=120) and a.document("x")["status"] == "indexed"
        assert d.documents()["total"] == 0
        schema = a.rag.index_state.db.schema
        assert ws.delete("alpha") and schema not in _schemas(d.rag.index_state.db.dsn)
    finally:
        ws.close()
