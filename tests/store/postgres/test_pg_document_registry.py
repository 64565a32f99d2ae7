"""Issue 39, item 1, on PostgreSQL: the document registry is written with the document rows, and a schema
from before the registry gets it filled when the index is opened (under the writer lock)."""
from __future__ import annotations

from helpers import CORPUS, make_rag

from hippo_engine.store.postgres.schema import psycopg_module


def test_postgres_registry_follows_changes_and_is_filled_for_an_older_schema(tmp_path, pg_dsn, pg_schema):
    opts = {"storage_backend": "postgres", "postgres_dsn": pg_dsn, "postgres_schema": pg_schema}
    with make_rag(tmp_path / "pg", **opts) as rag:
        rag.index(CORPUS[:4], ids=["d3", "d1", "d0", "d2"])
        assert [d["id"] for d in rag.documents()["documents"]] == ["d3", "d1", "d0", "d2"]
        rag.delete(ids=["d1"])
        assert rag.documents()["total"] == 3
    with psycopg_module().connect(pg_dsn, autocommit=True) as c:
        c.execute(f'DROP TABLE "{pg_schema}".document_registry')
    with make_rag(tmp_path / "pg", **opts) as rag:      # filled on open, by id (PostgreSQL keeps no insert order)
        assert [d["id"] for d in rag.documents()["documents"]] == ["d0", "d2", "d3"]
        rag.index([CORPUS[5]], ids=["d5"])
        assert [d["id"] for d in rag.documents()["documents"]] == ["d0", "d2", "d3", "d5"]
