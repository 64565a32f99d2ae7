"""The job store's backends (:class:`~hippo_engine.service.jobstore.JobStore`), one per index storage:

* :class:`SQLiteJobStore`: tables in the index's own SQLite file (``<save_dir>/index.sqlite``), on a
  connection of its own (WAL, a busy timeout as long as the index's writer lock timeout: an index write
  holds SQLite's write lock while it embeds, so accepting a document may wait for that batch to commit);
* :class:`PostgresJobStore`: tables in the index's schema, on a psycopg connection of its own; claims
  lock rows with ``FOR UPDATE SKIP LOCKED``, so processes over one index never claim one document twice.

:data:`BACKENDS` maps a backend's name to (does it serve this ``IndexStore``, open it for that store).
"""
from __future__ import annotations

import contextlib
import os
import socket
import sqlite3
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from hippo_engine.service.jobstore import JobStore
from hippo_engine.store.base import StoreError
from hippo_engine.store.document_registry import TABLE as REGISTRY

#: the tables (SQLite types; PostgreSQL's are derived in :class:`PostgresJobStore`)
_DOCS = ("doc_id TEXT PRIMARY KEY, rev INTEGER NOT NULL, status TEXT NOT NULL, text TEXT NOT NULL, title TEXT, "
         "metadata TEXT, error TEXT, job_id TEXT, seq INTEGER NOT NULL, pos INTEGER NOT NULL, attempts INTEGER NOT "
         "NULL, owner TEXT, claimed_rev INTEGER, purged INTEGER NOT NULL, created REAL NOT NULL, updated REAL NOT NULL")
_ITEMS = ("job_id TEXT NOT NULL, pos INTEGER NOT NULL, doc_id TEXT NOT NULL, rev INTEGER NOT NULL, "
          "PRIMARY KEY (job_id, pos)")
_INDEXES = {"service_documents_queue": "service_documents (status, seq, pos)",
            "service_documents_owner": "service_documents (owner)"}
TABLES = ("service_jobs", "service_documents", "service_job_items")


class SQLiteJobStore(JobStore):
    """The job tables in the SQLite file ``path`` (an index database)."""

    name = "sqlite"

    def __init__(self, path: str | Path, busy_timeout: float = 600.0):
        super().__init__()
        self.path = Path(path)
        self.location = str(self.path)
        if not self.path.is_file():
            raise StoreError(f"{self.path}: no index database here for the job tables")
        try:
            self.conn = sqlite3.connect(str(self.path), timeout=busy_timeout, isolation_level=None,
                                        check_same_thread=False)
            self.conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")
            if str(self.conn.execute("PRAGMA journal_mode").fetchone()[0]).lower() != "wal":
                self.conn.execute("PRAGMA journal_mode = WAL")
            self._create()
        except sqlite3.DatabaseError as e:
            raise StoreError(f"{self.path}: cannot open the job tables: {e}") from e

    def _create(self) -> None:
        with self._write() as c:
            c.execute("CREATE TABLE IF NOT EXISTS service_jobs (seq INTEGER PRIMARY KEY AUTOINCREMENT, job_id TEXT "
                      "NOT NULL UNIQUE, created REAL NOT NULL, total INTEGER NOT NULL)")
            c.execute(f"CREATE TABLE IF NOT EXISTS service_documents ({_DOCS})")
            c.execute(f"CREATE TABLE IF NOT EXISTS service_job_items ({_ITEMS})")
            for name, on in _INDEXES.items():
                c.execute(f"CREATE INDEX IF NOT EXISTS {name} ON {on}")

    def _sql(self, sql: str) -> str:
        return sql.format(d="service_documents", j="service_jobs", i="service_job_items", r=REGISTRY,
                          m="document_metadata")

    @contextlib.contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self.conn.execute("BEGIN IMMEDIATE")
            try:
                yield self.conn
            except BaseException:
                self.conn.execute("ROLLBACK")
                raise
            self.conn.execute("COMMIT")

    @contextlib.contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self.conn.execute("BEGIN")
            try:
                yield self.conn
            finally:
                self.conn.execute("COMMIT")

    def _new_job(self, c, job_id: str, created: float, total: int) -> int:
        cur = c.execute("INSERT INTO service_jobs (job_id, created, total) VALUES (?, ?, ?)", (job_id, created, total))
        return int(cur.lastrowid)

    def close(self) -> None:
        with self._lock:
            self.conn.close()


class PostgresJobStore(JobStore):
    """The job tables in schema ``schema`` of the PostgreSQL database at ``dsn`` (an index's schema)."""

    name = "postgres"
    _claim_lock = " FOR UPDATE SKIP LOCKED"
    _row_lock = " FOR UPDATE"

    def __init__(self, dsn: str, schema: str):
        super().__init__()
        from hippo_engine.store.postgres.schema import check_schema_name, psycopg_module
        self.psycopg = psycopg_module()
        self.dsn, self.schema = dsn, check_schema_name(schema)
        self.q = f'"{schema}"'
        self._names = {"d": f"{self.q}.service_documents", "j": f"{self.q}.service_jobs",
                       "i": f"{self.q}.service_job_items", "r": f"{self.q}.{REGISTRY}",
                       "m": f"{self.q}.document_metadata"}
        self.conn: Any = self._connect()
        errors = self.psycopg.errors
        self._retry_on = (errors.DeadlockDetected, errors.SerializationFailure)
        self.location = f"postgresql {self.conn.info.dbname} schema {schema}"
        self._create()

    def _connect(self) -> Any:
        try:
            return self.psycopg.connect(self.dsn, autocommit=True, application_name=(
                f"hippo-engine service pid {os.getpid()} host {socket.gethostname()}")[:63])
        except self.psycopg.Error as e:
            from hippo_engine.store.postgres.errors import connect_error
            raise connect_error(e, self.dsn, self.schema) from None

    def _live(self) -> Any:
        """The connection, opened again if it was lost (a server restart)."""
        if self.conn.closed or self.conn.broken:
            self.conn = self._connect()
        return self.conn

    def _create(self) -> None:
        from hippo_engine.store.postgres.schema import LOCK_CLASS
        docs = _DOCS.replace("doc_id TEXT", 'doc_id text COLLATE "C"').replace("REAL", "double precision")
        items = _ITEMS.replace("doc_id TEXT", 'doc_id text COLLATE "C"')
        with self._write() as c:    # one creator at a time (concurrent CREATE IF NOT EXISTS can collide)
            c.execute("SELECT pg_advisory_xact_lock(%s, %s)",
                      (LOCK_CLASS, zlib.crc32(f"{self.schema}:service".encode()) & 0x7FFFFFFF))
            c.execute(f"CREATE TABLE IF NOT EXISTS {self._names['j']} (seq bigserial PRIMARY KEY, job_id text COLLATE "
                      f'"C" NOT NULL UNIQUE, created double precision NOT NULL, total integer NOT NULL)')
            c.execute(f"CREATE TABLE IF NOT EXISTS {self._names['d']} ({docs})")
            c.execute(f"CREATE TABLE IF NOT EXISTS {self._names['i']} ({items})")
            for name, on in _INDEXES.items():
                c.execute(f"CREATE INDEX IF NOT EXISTS {name} ON {self.q}.{on}")

    def _sql(self, sql: str) -> str:
        return sql.replace("?", "%s").format(**self._names)

    @contextlib.contextmanager
    def _write(self) -> Iterator[Any]:
        with self._lock:
            conn = self._live()
            with conn.transaction():
                yield conn

    @contextlib.contextmanager
    def _read(self) -> Iterator[Any]:
        with self._lock:
            conn = self._live()
            conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            try:
                yield conn
            finally:
                conn.execute("ROLLBACK")

    def _new_job(self, c, job_id: str, created: float, total: int) -> int:
        return int(c.execute(self._sql("INSERT INTO {j} (job_id, created, total) VALUES (?, ?, ?) RETURNING seq"),
                             (job_id, created, total)).fetchone()[0])

    def close(self) -> None:
        with self._lock:
            self.conn.close()


def _is_sqlite(db) -> bool:
    return isinstance(getattr(db, "path", None), Path) and getattr(db, "conn", None) is not None \
        and isinstance(db.conn, sqlite3.Connection)


def _is_postgres(db) -> bool:
    return isinstance(getattr(db, "dsn", None), str) and isinstance(getattr(db, "schema", None), str)


def _sqlite_for(db, config) -> JobStore:
    return SQLiteJobStore(db.path, busy_timeout=max(60.0, float(getattr(config, "write_lock_timeout", 600.0))))


def _postgres_for(db, config) -> JobStore:
    return PostgresJobStore(db.dsn, db.schema)


#: backend name -> (serves this index store?, open the job store of that index store with the index's config)
BACKENDS: dict[str, tuple[Callable[[Any], bool], Callable[[Any, Any], JobStore]]] = {
    "sqlite": (_is_sqlite, _sqlite_for),
    "postgres": (_is_postgres, _postgres_for),
}


__all__ = ["BACKENDS", "TABLES", "PostgresJobStore", "SQLiteJobStore"]
