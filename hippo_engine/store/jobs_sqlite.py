"""The job tables in an index's SQLite file (:class:`SQLiteJobTables`), and a closed folder's file read
without opening its index (:func:`closed_sqlite_tables`).

The tables sit beside the index's own in ``<save_dir>/index.sqlite``, on a connection of their own (WAL, a
busy timeout as long as the index's writer lock timeout: an index write holds SQLite's write lock while it
embeds, so accepting a document may wait for that batch to commit).
"""
from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator, Sequence
from pathlib import Path

from hippo_engine.store.base import StoreError
from hippo_engine.store.document_registry import TABLE as REGISTRY
from hippo_engine.store.jobs import DOCUMENT_COLUMNS, INDEXES, ITEM_COLUMNS, ClosedTables, JobTables

#: errors of a SQLite index that say it is busy or unreachable, not that a document is bad
TRANSIENT_ERRORS: tuple[type[BaseException], ...] = (sqlite3.OperationalError,)


class SQLiteJobTables(JobTables):
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
        with self.write() as c:
            c.execute("CREATE TABLE IF NOT EXISTS service_jobs (seq INTEGER PRIMARY KEY AUTOINCREMENT, job_id TEXT "
                      "NOT NULL UNIQUE, created REAL NOT NULL, total INTEGER NOT NULL)")
            c.execute(f"CREATE TABLE IF NOT EXISTS service_documents ({DOCUMENT_COLUMNS})")
            c.execute(f"CREATE TABLE IF NOT EXISTS service_job_items ({ITEM_COLUMNS})")
            for name, on in INDEXES.items():
                c.execute(f"CREATE INDEX IF NOT EXISTS {name} ON {on}")

    def sql(self, sql: str) -> str:
        return sql.format(d="service_documents", j="service_jobs", i="service_job_items", r=REGISTRY,
                          m="document_metadata")

    def write(self) -> contextlib.AbstractContextManager[sqlite3.Connection]:
        return self._transaction("BEGIN IMMEDIATE", "ROLLBACK")

    def read(self) -> contextlib.AbstractContextManager[sqlite3.Connection]:
        return self._transaction("BEGIN", "COMMIT")      # a reader ends its snapshot the same way on an error

    @contextlib.contextmanager
    def _transaction(self, begin: str, on_error: str) -> Iterator[sqlite3.Connection]:
        with self.lock:
            self.conn.execute(begin)
            try:
                yield self.conn
            except BaseException:
                self.conn.execute(on_error)
                raise
            self.conn.execute("COMMIT")

    def new_job(self, c, job_id: str, created: float, total: int) -> int:
        cur = c.execute("INSERT INTO service_jobs (job_id, created, total) VALUES (?, ?, ?)", (job_id, created, total))
        return int(cur.lastrowid)

    def close(self) -> None:
        with self.lock:
            self.conn.close()


@contextlib.contextmanager
def closed_sqlite_tables(path: Path) -> Iterator[ClosedTables | None]:
    """The tables of the SQLite index file ``path`` read-only (None: no such file)."""
    if not path.is_file():
        yield None
        return
    names = {"r": REGISTRY, "d": "service_documents", "m": "document_metadata", "documents": "documents"}
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)) as c:
        tables = {r[0] for r in c.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}

        def run(sql: str, params: Sequence = ()) -> sqlite3.Cursor:
            return c.execute(sql.format(**names), tuple(params))
        yield ClosedTables(run, frozenset(k for k, t in names.items() if t in tables))


__all__ = ["TRANSIENT_ERRORS", "SQLiteJobTables", "closed_sqlite_tables"]
