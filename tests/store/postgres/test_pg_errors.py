"""Driver errors never reach callers raw: a server that went away, ids PostgreSQL cannot store,
DSNs PostgreSQL cannot parse (without showing their password) all become the engine's errors."""
from __future__ import annotations

import secrets

import numpy as np
import pytest
from helpers import CORPUS, make_rag

from hippo_engine.store.base import StoreConnectionLost, StoreError


def _terminate(dsn: str, backend_pid: int) -> None:
    import psycopg
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_terminate_backend(%s)", (backend_pid,))


def test_a_server_that_went_away_is_an_engine_error_that_says_to_reopen(tmp_path, pg_dsn, pg_schema):
    rag = make_rag(tmp_path / "m", storage_backend="postgres", postgres_dsn=pg_dsn, postgres_schema=pg_schema,
                   use_filter=False)
    rag.index(CORPUS[:2])
    db = rag.index_state.db
    _terminate(pg_dsn, db.conn.info.backend_pid)                      # the server drops the connection
    for _ in range(2):                                                 # and the object stays unusable, saying so
        with pytest.raises(StoreConnectionLost, match="server went away.*open the index again"):
            rag.index(CORPUS[2:4])
    with pytest.raises(StoreConnectionLost, match="open the index again"):
        db.passage_count()
    rag.close()
    again = make_rag(tmp_path / "m", storage_backend="postgres", postgres_dsn=pg_dsn, postgres_schema=pg_schema,
                     use_filter=False)                                # reopening works, nothing half-written
    assert len(again.index_state) == 2
    store = again.index_state.stores["passage"]
    _terminate(pg_dsn, again.index_state.db.conn.info.backend_pid)
    with pytest.raises(StoreConnectionLost):
        store.upsert(["k"], ["t"], np.ones((1, store.dim), np.float32))   # the embedding stores too
    again.close()


def test_ids_postgres_cannot_store_are_refused_at_the_door(tmp_path, pg_dsn, pg_schema):
    rag = make_rag(tmp_path / "m", storage_backend="postgres", postgres_dsn=pg_dsn, postgres_schema=pg_schema,
                   use_filter=False)
    for bad in (secrets.token_hex(1400), "nul\x00id"):
        with pytest.raises(ValueError, match=r"index\(\): ids item 0"):
            rag.index(CORPUS[:1], ids=[bad])
    assert len(rag.index_state) == 0
    with pytest.raises(StoreError, match="over one of PostgreSQL's limits"):    # past the door: still ours
        rag.index_state.db.put_documents({secrets.token_hex(1500): ["chunk-x"]})   # (incompressible)
    rag.close()


@pytest.mark.parametrize("dsn, secret", [
    ("postgresql+psycopg://user:hunter2secret@localhost/db?sslmode=disable", "hunter2secret"),
    ("host=/nonexistent password=se cretpart dbname=x", "cretpart"),
    ("host=/nonexistent password='hunter2 x' dbname", "hunter2"),
])
def test_an_unparsable_dsn_is_never_echoed_with_its_password(tmp_path, dsn, secret):
    from helpers import require_postgres
    require_postgres()
    from hippo_engine.store.postgres import PostgresIndexStore
    with pytest.raises(StoreError) as got:
        PostgresIndexStore(dsn, "hippo")
    assert secret not in str(got.value) and "***" in str(got.value)
    with pytest.raises(StoreError) as got:
        make_rag(tmp_path / "m", dsn=dsn)
    assert secret not in str(got.value)


def test_a_refused_connection_names_the_server_without_the_password():
    from helpers import require_postgres
    require_postgres()
    from hippo_engine.store.postgres import PostgresIndexStore
    with pytest.raises(StoreError, match=r"postgresql://u:\*\*\*@127.0.0.1:1/db") as got:
        PostgresIndexStore("postgresql://u:hunter2@127.0.0.1:1/db?connect_timeout=2", "hippo")
    assert "hunter2" not in str(got.value)
