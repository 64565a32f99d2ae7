"""Fixtures of the storage tests: one embedded PostgreSQL server for the whole test session and a
fresh schema per test, one embedded FalkorDB server for the session and a graph per index folder
(each skipped where its extra is not installed)."""
from __future__ import annotations

import os
import subprocess
import tempfile
import uuid
from pathlib import Path

import pytest
from helpers import require_falkordb, require_postgres


def pg_base_dir(prefix: str = "hippo-pgtest-") -> Path:
    """A new folder for PostgreSQL data directories. pytest's own tmp folders are private to
    their user (0700), which the server's user cannot enter when the tests run as root, so these
    live in the system temp folder, made traversable (0711) by the tests."""
    base = Path(tempfile.mkdtemp(prefix=prefix))
    if os.geteuid() == 0:
        base.chmod(0o711)
    return base


def remove_soon(path: Path) -> None:
    """Remove a data directory without waiting: deleting files that were synced to disk takes
    seconds on file systems mounted with ``discard``; nothing uses the folder any more."""
    subprocess.Popen(["rm", "-rf", "--", str(path)], start_new_session=True,
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


@pytest.fixture
def pg_dirs():
    """A factory of folders for PostgreSQL data directories (see :func:`pg_base_dir`); at the end
    of the test, servers left running in them are stopped and the folders removed."""
    made: list[Path] = []

    def make() -> Path:
        made.append(pg_base_dir())
        return made[-1]

    yield make
    from hippo_engine.store.postgres.server import EmbeddedPostgres
    for base in made:
        for pid_file in base.rglob("postmaster.pid"):
            EmbeddedPostgres(pid_file.parent).stop(force=True, mode="immediate")
        remove_soon(base)


@pytest.fixture(scope="session")
def pg_server():
    """An embedded PostgreSQL server shared by the session's tests (stopped at the end)."""
    require_postgres()
    from hippo_engine.store.postgres.server import EmbeddedPostgres
    base = pg_base_dir()
    server = EmbeddedPostgres(base / "pg")
    try:
        server.start()
        yield server
    finally:
        server.stop(mode="immediate")   # the data is thrown away: no shutdown checkpoint
        remove_soon(base)


@pytest.fixture
def pg_dsn(pg_server) -> str:
    """The DSN of the session's server."""
    return pg_server.dsn()


@pytest.fixture
def pg_schema(pg_dsn):
    """A fresh schema name for one test (dropped afterwards)."""
    import psycopg
    name = f"t_{uuid.uuid4().hex[:16]}"
    yield name
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


@pytest.fixture(scope="session")
def falkordb_server():
    """An embedded FalkorDB server shared by the session's tests (each test index gets a graph of its
    own on it); stopped at the end."""
    require_falkordb()
    from hippo_engine.store.falkordb.server import EmbeddedFalkorDB
    base = Path(tempfile.mkdtemp(prefix="hippo-fktest-"))
    server = EmbeddedFalkorDB(base / "falkordb")
    try:
        server.start()
        yield server
    finally:
        server.stop(force=True)
        remove_soon(base)


@pytest.fixture
def storage_settings(request):
    """``settings(name)``: the configuration a test index of backend ``name`` needs (PostgreSQL: the session's
    server and a fresh schema, started only when asked; SQLite: nothing)."""
    def settings(name: str) -> dict:
        if name == "postgres":
            return {"postgres_dsn": request.getfixturevalue("pg_dsn"),
                    "postgres_schema": request.getfixturevalue("pg_schema")}
        if name == "falkordb":
            return {"falkordb_server": str(request.getfixturevalue("falkordb_server").data_dir)}
        return {}
    return settings
