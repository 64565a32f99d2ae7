"""Fixtures of the storage tests: one embedded PostgreSQL server for the whole test session and a
fresh schema per test (skipped where the PostgreSQL extra is not installed)."""
from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from pathlib import Path

import pytest


def pg_base_dir(prefix: str = "hippo-pgtest-") -> Path:
    """A new folder for PostgreSQL data directories. pytest's own tmp folders are private to
    their user (0700), which the server's user cannot enter when the tests run as root, so these
    live in the system temp folder, made traversable (0711) by the tests."""
    base = Path(tempfile.mkdtemp(prefix=prefix))
    if os.geteuid() == 0:
        base.chmod(0o711)
    return base


@pytest.fixture(scope="session")
def pg_server():
    """An embedded PostgreSQL server shared by the session's tests (stopped at the end)."""
    pytest.importorskip("psycopg")
    pytest.importorskip("pgvector")
    from hippo_engine.store.postgres.server import EmbeddedPostgres, ServerError, bin_dir
    try:
        bin_dir()
    except ServerError as e:
        pytest.skip(str(e))
    base = pg_base_dir()
    server = EmbeddedPostgres(base / "pg")
    try:
        server.start()
        yield server
    finally:
        server.stop(mode="immediate")   # the data is thrown away: no shutdown checkpoint
        shutil.rmtree(base, ignore_errors=True)


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
