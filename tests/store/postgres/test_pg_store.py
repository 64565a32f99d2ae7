"""PostgresIndexStore beyond the shared contract: writers serialised by the advisory lock, a
writer killed with SIGKILL mid-transaction, schemas (foreign, invalid, independent), messages."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("psycopg")
pytest.importorskip("pgvector")

from hippo_engine.store import StoreError  # noqa: E402
from hippo_engine.store.lock import IndexLockedError  # noqa: E402
from hippo_engine.store.postgres import PostgresIndexStore  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]
DIM = 4

WRITER = textwrap.dedent("""
    import sys, time
    import numpy as np
    from hippo_engine.store.postgres import PostgresIndexStore
    db = PostgresIndexStore(sys.argv[1], sys.argv[2])
    st = db.embedding_store("entity", 4)
    with db.transaction():
        db.set_meta("version", "2")
        db.put_passage_triples("p1", [("changed", "by", "killed writer")])
        db.replace_synonymy_lists({"a": {}})
        st.upsert(["e2"], ["new"], np.eye(4, dtype=np.float32)[1:2])
        st.delete(["e1"])
        print("ready", flush=True)
        time.sleep(120)
""")


@pytest.fixture
def db(pg_dsn, pg_schema):
    store = PostgresIndexStore(pg_dsn, pg_schema)
    yield store
    store.close()


def test_a_writer_killed_mid_transaction_leaves_the_previous_state(pg_dsn, pg_schema, db):
    st = db.embedding_store("entity", DIM)
    with db.transaction():
        db.set_meta("version", "1")
        db.put_passage_triples("p1", [("a", "b", "c")])
        db.replace_synonymy_lists({"a": {"b": 0.9}})
        st.upsert(["e1"], ["old"], np.eye(DIM, dtype=np.float32)[:1])
    child = subprocess.Popen([sys.executable, "-c", WRITER, pg_dsn, pg_schema], cwd=ROOT, stdout=subprocess.PIPE,
                             text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert child.stdout.readline().strip() == "ready"
        other = PostgresIndexStore(pg_dsn, pg_schema, lock_timeout=0.2)
        with pytest.raises(IndexLockedError, match=f"hippo-engine pid {child.pid} "):
            with other.transaction():
                pass
        assert other.get_meta("version") == "1"                     # its writes are not visible
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
    other.lock_timeout = 10
    t = time.perf_counter()
    with other.transaction():                                       # the lock went with the connection
        other.set_meta("after", "yes")
    assert time.perf_counter() - t < 5
    assert db.get_meta("version") == "1" and db.get_meta("after") == "yes"
    assert db.load_passage_triples() == {"p1": [("a", "b", "c")]}
    assert db.load_synonymy() == {"a": {"b": 0.9}}
    fresh = db.embedding_store("entity", DIM)
    assert list(fresh.ids) == ["e1"] and fresh.text("e1") == "old"
    other.close()


def test_writers_of_one_schema_wait_for_each_other_not_for_other_schemas(pg_dsn, pg_schema, db):
    same = PostgresIndexStore(pg_dsn, pg_schema, lock_timeout=0.1)
    elsewhere = PostgresIndexStore(pg_dsn, pg_schema + "_b", lock_timeout=0.1)
    try:
        with db.transaction():
            db.set_meta("holder", "db")
            with pytest.raises(IndexLockedError, match="is being written by hippo-engine pid"):
                same.set_meta("x", "1")                              # a lone write takes the lock too
            with elsewhere.transaction():
                elsewhere.set_meta("x", "1")
        same.set_meta("x", "1")                                      # free again after the commit
        assert db.get_meta("x") == "1" and elsewhere.get_meta("holder") is None
        assert same.lock_holder() == "nobody (now)"
    finally:
        same.close()
        elsewhere.close()
        import psycopg
        with psycopg.connect(pg_dsn, autocommit=True) as c:
            c.execute(f'DROP SCHEMA IF EXISTS "{pg_schema}_b" CASCADE')


def test_a_foreign_schema_is_refused_untouched(pg_dsn, pg_schema):
    import psycopg
    with psycopg.connect(pg_dsn, autocommit=True) as c:
        c.execute(f'CREATE SCHEMA "{pg_schema}"')
        c.execute(f'CREATE TABLE "{pg_schema}".customers (id int)')
        with pytest.raises(StoreError, match=f"schema {pg_schema} of postgresql database postgres holds tables "
                                             r"\(customers\) but is not a hippo-engine index"):
            PostgresIndexStore(pg_dsn, pg_schema)
        tables = c.execute("SELECT tablename FROM pg_tables WHERE schemaname=%s", (pg_schema,)).fetchall()
        assert tables == [("customers",)]


def test_schema_version_and_names_are_checked(pg_dsn, pg_schema, db):
    db.set_meta("schema_version", "99")
    with pytest.raises(StoreError, match=f"schema {pg_schema} has schema version 99"):
        PostgresIndexStore(pg_dsn, pg_schema)
    for bad in ("", "1abc", 'x"; DROP TABLE meta; --', "a" * 64):
        with pytest.raises(StoreError, match="schema name"):
            PostgresIndexStore(pg_dsn, bad)


def test_location_and_connection_errors_name_the_database_without_password(pg_server, pg_schema):
    dsn = pg_server.dsn() + " password=s3cret"
    store = PostgresIndexStore(dsn, pg_schema)
    assert store.location == f"postgresql postgres schema {pg_schema}" and "s3cret" not in store.location
    store.close()
    with pytest.raises(StoreError) as err:
        PostgresIndexStore(pg_server.dsn("no_such_db") + " password=s3cret", pg_schema)
    assert "no_such_db" in str(err.value) and "s3cret" not in str(err.value).split(":")[0]


def test_snapshot_rules(db):
    with db.snapshot():
        with pytest.raises(StoreError, match="inside a snapshot"):
            with db.transaction():
                pass
        st = db.embedding_store("passage", DIM)                      # its table can be made in a snapshot
        assert len(st) == 0
    with db.transaction():
        with db.snapshot():                                          # inside a write: that transaction's view
            db.set_meta("seen", "1")
            assert db.get_meta("seen") == "1"
    assert db.passage_ids() == [] and db.passage_count() == 0


def test_embedding_table_keeps_its_type_and_dimension(db):
    st = db.embedding_store("fact", DIM, vector_dtype="float16")
    assert st.kind == "halfvec" and st.vector_dtype == np.float16
    again = db.embedding_store("fact", DIM, vector_dtype="float32")  # the table decides
    assert again.kind == "halfvec"
    with pytest.raises(StoreError, match="fact store holds 4-dim vectors but the encoder gives 5"):
        db.embedding_store("fact", DIM + 1)
    st.upsert(["f"], ["t"], np.full((1, DIM), 0.1, np.float32))
    expect = np.full((1, DIM), np.float16(0.1), np.float32)           # rounded to half precision
    np.testing.assert_array_equal(st.matrix, expect)
    np.testing.assert_array_equal(db.embedding_store("fact", DIM).matrix, expect)


def test_a_mixed_case_schema_is_its_own(pg_dsn, pg_schema):
    name = pg_schema.replace("t_", "T_Mixed_")
    try:
        db = PostgresIndexStore(pg_dsn, name)
        db.set_meta("version", "3")
        db.close()
        db = PostgresIndexStore(pg_dsn, name)                        # found again, not created twice
        assert db.get_meta("version") == "3" and db.location.endswith(f"schema {name}")
        db.close()
    finally:
        import psycopg
        with psycopg.connect(pg_dsn, autocommit=True) as c:
            c.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
