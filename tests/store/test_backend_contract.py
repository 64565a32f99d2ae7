"""What a storage backend gives the service, run against every registered backend (SQLite and PostgreSQL
built in, each index opened as an index folder is, as in ``test_index_store_contract.py``): the job tables
beside an opened index (transactions, placeholders, table names, a second connection seeing commits),
``drop()`` of an index's storage, the shared storage of the indexes under one root (options, reading a
closed folder, dropping one) and the classification of its passing errors.
"""
from __future__ import annotations

import sqlite3

import pytest

from hippo_engine.config import ConfigError, HippoConfig
from hippo_engine.store.jobs import JobTables
from hippo_engine.store.lock import IndexLockedError
from hippo_engine.store.opening import index_exists, open_index_store, recorded_storage
from hippo_engine.store.registry import StorageBackend, backend_for, backend_names, get_backend, transient_errors

BACKENDS = backend_names()


@pytest.fixture(params=BACKENDS)
def backend(request, storage_settings) -> tuple[StorageBackend, HippoConfig]:
    name = request.param
    return get_backend(name), HippoConfig(storage_backend=name, show_progress=False, **storage_settings(name))


@pytest.fixture
def tables(backend, tmp_path):
    """The job tables of a new index of the parametrized backend, and a second connection to them."""
    b, config = backend
    db = open_index_store(tmp_path, config)
    made: list[JobTables] = []
    try:
        made += [b.job_tables(db, config), b.job_tables(db, config)]
        yield made[0], made[1]
    finally:
        for t in made:
            t.close()
        db.close()


def _add_job(t: JobTables, job_id: str, doc_id: str) -> int:
    with t.write() as c:
        seq = t.new_job(c, job_id, 1.0, 1)
        t.x(c, "INSERT INTO {d} (doc_id, rev, status, text, title, metadata, error, job_id, seq, pos, attempts, "
               "owner, claimed_rev, purged, created, updated) VALUES (?, 1, 'pending', ?, NULL, NULL, NULL, ?, ?, 0, "
               "0, NULL, NULL, 1, 1.0, 1.0)", (doc_id, "text", job_id, seq))
        t.x(c, "INSERT INTO {i} (job_id, pos, doc_id, rev) VALUES (?, 0, ?, 1)", (job_id, doc_id))
    return seq


# ---------------------------------------------------------------------------------------- job tables
def test_job_tables_commit_what_another_connection_then_reads(tables, backend):
    a, b = tables
    assert a.name == backend[0].name and isinstance(a.location, str) and a.location
    first, second = _add_job(a, "j1", "d1"), _add_job(a, "j2", "d2")
    assert second > first                                     # the queue's order
    with b.read() as c:
        rows = b.x(c, "SELECT d.doc_id, i.job_id FROM {d} d JOIN {i} i ON i.doc_id = d.doc_id "
                      "WHERE d.status = ? ORDER BY d.seq",
                   ("pending",)).fetchall()
        assert [tuple(r) for r in rows] == [("d1", "j1"), ("d2", "j2")]
        assert b.x(c, "SELECT COUNT(*) FROM {j}").fetchone()[0] == 2


def test_a_failed_write_leaves_nothing_and_the_claim_clause_selects(tables):
    a, b = tables
    with pytest.raises(RuntimeError), a.write() as c:
        a.new_job(c, "gone", 1.0, 1)
        raise RuntimeError("rolled back")
    _add_job(a, "j1", "d1")
    with b.write() as c:                                     # a claim's SELECT with the backend's row locks
        got = b.x(c, "SELECT doc_id FROM {d} WHERE status = ? ORDER BY seq, pos LIMIT ?" + b.claim_lock,
                  ("pending", 5)).fetchall()
    assert [r[0] for r in got] == ["d1"]
    with a.read() as c:
        assert [r[0] for r in a.x(c, "SELECT job_id FROM {j}").fetchall()] == ["j1"]
        assert a.x(c, "SELECT COUNT(*) FROM {r}").fetchone()[0] == 0              # the index's own tables
        assert a.x(c, "SELECT COUNT(*) FROM {m}").fetchone()[0] == 0
    assert all(issubclass(e, BaseException) for e in a.retry_on)


# ---------------------------------------------------------------------------------------- drop
def test_drop_removes_the_index_and_its_data(backend, tmp_path):
    b, config = backend
    folder = tmp_path / "idx"
    db = open_index_store(folder, config)
    db.set_meta("marker", "old")
    db.close()
    assert recorded_storage(folder) is not None and index_exists(folder, config)
    b.drop(folder, config)
    assert not folder.exists()
    db = open_index_store(folder, config)                    # a new, empty index where the old one was
    try:
        assert db.get_meta("marker") is None and db.passage_count() == 0
    finally:
        db.close()
    b.drop(folder, config)
    b.drop(folder, config)                                   # nothing left: no error


# ---------------------------------------------------------------------------------------- shared storage
def test_the_shared_storage_reads_a_closed_folder_and_drops_it(backend, tmp_path):
    b, config = backend
    root = tmp_path / "root"
    shared = b.shared(root, config.postgres_dsn)
    try:
        folder = root / "workspaces" / "one"
        assert shared.options({"x": 1}, default=False)["x"] == 1
        with shared.closed_tables(folder) as t:
            assert t is None or not ({"r", "d"} <= t.have)    # nothing there yet
        db = open_index_store(folder, config)
        b.job_tables(db, config).close()
        db.close()
        with shared.closed_tables(folder) as t:
            assert t is not None and {"r", "d", "m", "documents"} <= t.have
            assert t.run("SELECT COUNT(*) FROM {d} WHERE status = ?", ("pending",)).fetchone()[0] == 0
        shared.drop(folder)
        assert not folder.exists() and recorded_storage(folder) is None
    finally:
        shared.close()


# ---------------------------------------------------------------------------------------- passing errors
def _busy_error(name: str, tmp_path, request) -> BaseException:
    """An error the backend raises while its database is busy or unreachable."""
    if name == "sqlite":
        from hippo_engine.store.jobs_sqlite import SQLiteJobTables
        config = HippoConfig(show_progress=False)
        open_index_store(tmp_path, config).close()
        t = SQLiteJobTables(tmp_path / "index.sqlite", busy_timeout=0.05)
        holder = sqlite3.connect(tmp_path / "index.sqlite", isolation_level=None)
        try:
            holder.execute("BEGIN EXCLUSIVE")
            with pytest.raises(Exception) as got, t.write():
                pass
            return got.value
        finally:
            holder.close()
            t.close()
    if name == "postgres":
        import psycopg
        request.getfixturevalue("pg_server")
        with pytest.raises(Exception) as got:
            psycopg.connect("host=127.0.0.1 port=1 dbname=x user=x connect_timeout=2")
        return got.value
    if name == "falkordb":
        from hippo_engine.store.falkordb.address import FalkorAddress
        request.getfixturevalue("falkordb_server")
        with pytest.raises(Exception) as got:
            FalkorAddress(host="127.0.0.1", port=1).connect(timeout=2)
        return got.value
    pytest.skip(f"no busy-database case written for backend {name!r}")
    raise AssertionError


@pytest.mark.parametrize("name", BACKENDS)
def test_passing_errors_are_told_from_a_documents_fault(name, tmp_path, request):
    kinds = transient_errors(name)
    for generic in (IndexLockedError, ConnectionError, TimeoutError):
        assert generic in kinds
    assert isinstance(_busy_error(name, tmp_path, request), kinds)
    assert not isinstance(ValueError("a bad document"), kinds)


def test_an_unknown_backend_is_refused_when_the_storage_is_opened(tmp_path):
    config = HippoConfig(storage_backend="nope")             # a name only: nothing is opened yet
    with pytest.raises(ConfigError, match=r"storage_backend: .*unknown storage backend 'nope'; registered "
                                          r"backends: sqlite, postgres, falkordb \(got 'nope'\)"):
        open_index_store(tmp_path, config)
    with pytest.raises(ConfigError, match="unknown storage backend"):
        backend_for("nope")
    assert not any(tmp_path.iterdir())


def test_a_backend_declares_what_the_service_needs():
    with pytest.raises(TypeError, match="job_tables"):
        StorageBackend("partial", lambda *a: None, lambda *a: False)   # type: ignore[call-arg]
