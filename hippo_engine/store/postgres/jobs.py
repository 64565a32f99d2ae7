"""The job tables in an index's PostgreSQL schema (:class:`PostgresJobTables`), a closed folder's schema
read without opening its index (:func:`closed_postgres_tables`) and the drop of an index's schema
(:func:`drop_schema`).

The job tables sit in the index's schema, on a psycopg connection of their own; a claim locks rows with
``FOR UPDATE SKIP LOCKED``, so processes over one index never claim one document twice.
"""
from __future__ import annotations

import contextlib
import os
import socket
import zlib
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from hippo_engine.store.base import StoreError
from hippo_engine.store.document_registry import TABLE as REGISTRY
from hippo_engine.store.identity import folder_key
from hippo_engine.store.jobs import DOCUMENT_COLUMNS, INDEXES, ITEM_COLUMNS, ClosedTables, JobTables
from hippo_engine.store.postgres.errors import connect_error
from hippo_engine.store.postgres.schema import LOCK_CLASS, check_schema_name, lock_key, psycopg_module


def transient_errors() -> tuple[type[BaseException], ...]:
    """Errors of a PostgreSQL index that say it is busy or unreachable (none without psycopg)."""
    try:
        import psycopg
    except ImportError:
        return ()
    return (psycopg.OperationalError,)


class PostgresJobTables(JobTables):
    """The job tables in schema ``schema`` of the PostgreSQL database at ``dsn`` (an index's schema)."""

    name = "postgres"
    claim_lock = " FOR UPDATE SKIP LOCKED"
    row_lock = " FOR UPDATE"

    def __init__(self, dsn: str, schema: str):
        super().__init__()
        self.psycopg = psycopg_module()
        self.dsn, self.schema = dsn, check_schema_name(schema)
        self.q = f'"{schema}"'
        self._names = {"d": f"{self.q}.service_documents", "j": f"{self.q}.service_jobs",
                       "i": f"{self.q}.service_job_items", "r": f"{self.q}.{REGISTRY}",
                       "m": f"{self.q}.document_metadata"}
        self.conn: Any = self._connect()
        errors = self.psycopg.errors
        self.retry_on = (errors.DeadlockDetected, errors.SerializationFailure)
        self.location = f"postgresql {self.conn.info.dbname} schema {schema}"
        self._create()

    def _connect(self) -> Any:
        try:
            return self.psycopg.connect(self.dsn, autocommit=True, application_name=(
                f"hippo-engine service pid {os.getpid()} host {socket.gethostname()}")[:63])
        except self.psycopg.Error as e:
            raise connect_error(e, self.dsn, self.schema) from None

    def _live(self) -> Any:
        """The connection, opened again if it was lost (a server restart)."""
        if self.conn.closed or self.conn.broken:
            self.conn = self._connect()
        return self.conn

    def _create(self) -> None:
        docs = DOCUMENT_COLUMNS.replace("doc_id TEXT", 'doc_id text COLLATE "C"').replace("REAL", "double precision")
        items = ITEM_COLUMNS.replace("doc_id TEXT", 'doc_id text COLLATE "C"')
        with self.write() as c:    # one creator at a time (concurrent CREATE IF NOT EXISTS can collide)
            c.execute("SELECT pg_advisory_xact_lock(%s, %s)",
                      (LOCK_CLASS, zlib.crc32(f"{self.schema}:service".encode()) & 0x7FFFFFFF))
            c.execute(f"CREATE TABLE IF NOT EXISTS {self._names['j']} (seq bigserial PRIMARY KEY, job_id text COLLATE "
                      f'"C" NOT NULL UNIQUE, created double precision NOT NULL, total integer NOT NULL)')
            c.execute(f"CREATE TABLE IF NOT EXISTS {self._names['d']} ({docs})")
            c.execute(f"CREATE TABLE IF NOT EXISTS {self._names['i']} ({items})")
            for name, on in INDEXES.items():
                c.execute(f"CREATE INDEX IF NOT EXISTS {name} ON {self.q}.{on}")

    def sql(self, sql: str) -> str:
        return sql.replace("?", "%s").format(**self._names)

    @contextlib.contextmanager
    def write(self) -> Iterator[Any]:
        with self.lock:
            conn = self._live()
            with conn.transaction():
                yield conn

    @contextlib.contextmanager
    def read(self) -> Iterator[Any]:
        with self.lock:
            conn = self._live()
            conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            try:
                yield conn
            finally:
                conn.execute("ROLLBACK")

    def new_job(self, c, job_id: str, created: float, total: int) -> int:
        return int(c.execute(self.sql("INSERT INTO {j} (job_id, created, total) VALUES (?, ?, ?) RETURNING seq"),
                             (job_id, created, total)).fetchone()[0])

    def close(self) -> None:
        with self.lock:
            self.conn.close()


@contextlib.contextmanager
def closed_postgres_tables(dsn: Callable[[], str], schema: str) -> Iterator[ClosedTables]:
    """The tables of the index in ``schema`` read-only, on the server of ``dsn()``."""
    q = f'"{check_schema_name(schema)}"'
    names = {"r": f"{q}.{REGISTRY}", "d": f"{q}.service_documents", "m": f"{q}.document_metadata",
             "documents": f"{q}.documents"}
    with psycopg_module().connect(dsn(), autocommit=True) as c:
        have = frozenset(k for k, t in names.items()
                         if c.execute("SELECT to_regclass(%s) IS NOT NULL", (t,)).fetchone()[0])

        def run(sql: str, params: Sequence = ()) -> Any:
            return c.execute(sql.replace("?", "%s").format(**names), tuple(params))
        yield ClosedTables(run, have)


def drop_schema(dsn: str, schema: str, folder: Path) -> None:
    """Drop the PostgreSQL schema of the index of ``folder`` (under its writers' lock), after checking that
    the schema holds that folder's index and no other's."""
    check_schema_name(schema)
    with psycopg_module().connect(dsn, autocommit=True) as conn, conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s, %s)", lock_key(schema))
        if conn.execute("SELECT to_regclass(%s) IS NOT NULL", (f'"{schema}".meta',)).fetchone()[0]:
            row = conn.execute(f"SELECT value FROM \"{schema}\".meta WHERE key = 'index_folder'").fetchone()
            if row is not None and row[0] != folder_key(folder):
                raise StoreError(f"schema {schema} holds the index of {row[0]}, not of {folder_key(folder)}; "
                                 "nothing was dropped")
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


__all__ = ["PostgresJobTables", "closed_postgres_tables", "drop_schema", "transient_errors"]
