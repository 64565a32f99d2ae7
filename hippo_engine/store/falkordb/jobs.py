"""The service's job tables of a FalkorDB index (:class:`FalkorJobTables`) and a closed folder's tables
(:func:`closed_falkor_tables`).

The queue's tables are SQL (:mod:`hippo_engine.store.jobs`), which a graph database does not run: they sit
in a SQLite file in the index folder (:data:`SERVICE_FILE`), and each transaction on them first copies
the index's document registry and document metadata from the graph (the committed version, read on a
connection of the job tables' own) into temporary tables of the same names, so that the service's
listings join them as on the other backends. The copy costs a read of two small node sets per
transaction; the graph stays the only place they are written.
"""
from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from hippo_engine.store.document_registry import TABLE as REGISTRY
from hippo_engine.store.jobs import ClosedTables
from hippo_engine.store.jobs_sqlite import SQLiteJobTables

SERVICE_FILE = "falkordb-service.sqlite"
_MIRRORS = (f"CREATE TEMP TABLE IF NOT EXISTS {REGISTRY} (seq INTEGER PRIMARY KEY, doc_id TEXT NOT NULL UNIQUE, "
            "added REAL NOT NULL, updated REAL NOT NULL)",
            "CREATE TEMP TABLE IF NOT EXISTS document_metadata (doc_id TEXT PRIMARY KEY, metadata TEXT NOT NULL)",
            "CREATE TEMP TABLE IF NOT EXISTS documents (doc_id TEXT NOT NULL, pos INTEGER NOT NULL, "
            "passage_id TEXT NOT NULL, PRIMARY KEY (doc_id, pos))")


def copy_index_tables(conn: sqlite3.Connection, reader: Any, documents: bool = False) -> None:
    """Fill the temporary tables of ``conn`` with the registry and metadata (and, with ``documents``,
    the passages of each document) of the index ``reader`` reads (a ``FalkorIndexStore``)."""
    for sql in _MIRRORS:
        conn.execute(sql)
    for table in (REGISTRY, "document_metadata", "documents"):
        conn.execute(f"DELETE FROM temp.{table}")
    conn.executemany(f"INSERT INTO temp.{REGISTRY} (seq, doc_id, added, updated) VALUES (?, ?, ?, ?)",
                     reader.registry_rows())
    conn.executemany("INSERT INTO temp.document_metadata (doc_id, metadata) VALUES (?, ?)",
                     reader.all_document_metadata())
    if documents:
        rows = reader.q("read documents", "MATCH (d:Document) RETURN d.id, d.chunk_ids")
        conn.executemany("INSERT INTO temp.documents VALUES (?, ?, ?)",
                         [(d, i, p) for d, pids in rows for i, p in enumerate(pids)])


class FalkorJobTables(SQLiteJobTables):
    """The job tables of the FalkorDB index read by ``reader`` (a store on a connection of its own, closed
    with the tables), in ``<folder>/falkordb-service.sqlite``."""

    name = "falkordb"

    def __init__(self, folder: Path, reader: Any, busy_timeout: float = 600.0):
        self.reader = reader
        path = Path(folder) / SERVICE_FILE
        sqlite3.connect(path).close()          # the file the SQLite tables expect
        super().__init__(path, busy_timeout=busy_timeout)
        self.location = f"{path} beside {reader.location}"

    def sql(self, sql: str) -> str:
        return sql.format(d="service_documents", j="service_jobs", i="service_job_items", r=f"temp.{REGISTRY}",
                          m="temp.document_metadata")

    @contextlib.contextmanager
    def _transaction(self, begin: str, on_error: str) -> Iterator[sqlite3.Connection]:
        with super()._transaction(begin, on_error) as conn:
            copy_index_tables(conn, self.reader)
            yield conn

    def close(self) -> None:
        super().close()
        self.reader.close()


@contextlib.contextmanager
def closed_falkor_tables(folder: Path, reader: Any) -> Iterator[ClosedTables]:
    """The tables of the closed index of ``folder`` read-only: its queue (if it was served) and, copied
    from the graph ``reader`` reads, its registry, metadata and documents."""
    path = Path(folder) / SERVICE_FILE
    uri = f"file:{path}?mode=ro" if path.is_file() else "file::memory:"
    with contextlib.closing(sqlite3.connect(uri, uri=True, timeout=30)) as c:
        served = c.execute("SELECT 1 FROM sqlite_master WHERE name = 'service_documents'").fetchone() is not None
        copy_index_tables(c, reader, documents=True)
        names = {"r": f"temp.{REGISTRY}", "d": "service_documents", "m": "temp.document_metadata",
                 "documents": "temp.documents"}

        def run(sql: str, params: Sequence = ()) -> sqlite3.Cursor:
            return c.execute(sql.format(**names), tuple(params))
        yield ClosedTables(run, frozenset(k for k in names if k != "d" or served))


__all__ = ["SERVICE_FILE", "FalkorJobTables", "closed_falkor_tables", "copy_index_tables"]
