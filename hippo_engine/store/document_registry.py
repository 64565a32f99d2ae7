"""The document registry of an index: one row per document, the one list every door shows.

Table ``document_registry`` (``seq``: the order documents were first indexed; ``doc_id``; ``added``
and ``updated``: epoch seconds of the first and the latest indexing of the id). It lives beside the
index's ``documents`` rows, in the same database, and changes in the same transaction as they do:

* ``IndexStore.put_documents`` adds a row for a new id and touches ``updated`` of a known one (a
  document indexed again with another text);
* ``IndexStore.delete_documents`` removes the rows;
* passages kept without document rows (indexed before document ids were recorded, or added with
  ``IndexState.add``) are registered under their legacy id (:func:`~hippo_engine.ids.legacy_document_id`),
  as ``HippoRAG.retrieve`` reports them, by the index writer; removing such a passage removes its row.

So every path that adds or deletes (Python, the CLI, Ray, the service's jobs, MCP) writes it, because
they all write through :class:`~hippo_engine.index.writer.IndexWriter`. An index written before the
registry existed gets its rows on the first open by this version (:func:`fill_sqlite`,
:func:`fill_postgres`), in the transaction that creates the table: its documents in the order they were
stored, then its legacy passages.

The service's views (``GET /documents``, ``/workspaces``, ``/stats``, the web page, MCP ``memory_stats``)
read this table joined with the ingestion queue (:mod:`hippo_engine.service.doclist`).
"""
from __future__ import annotations

import time
from collections.abc import Iterable

from hippo_engine.ids import legacy_document_id

TABLE = "document_registry"
#: the table in SQLite and in PostgreSQL
SQLITE_COLUMNS = ("seq INTEGER PRIMARY KEY AUTOINCREMENT, doc_id TEXT NOT NULL UNIQUE, added REAL NOT NULL, "
                  "updated REAL NOT NULL")
POSTGRES_COLUMNS = ('seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, doc_id text COLLATE "C" NOT NULL UNIQUE, '
                    'added double precision NOT NULL, updated double precision NOT NULL')
#: an upsert that keeps a known id's place and first time (``?`` placeholders; PostgreSQL's use ``%s``)
UPSERT = ("INSERT INTO {t} (doc_id, added, updated) VALUES (?, ?, ?) ON CONFLICT (doc_id) DO UPDATE SET "
          "updated = excluded.updated")
#: the passages without document rows (their ids), in a stable order
_BARE = ("SELECT p.id FROM {p} p WHERE NOT EXISTS (SELECT 1 FROM {d} d WHERE d.passage_id = p.id) ORDER BY p.id")


def rows(doc_ids: Iterable[str], t: float | None = None) -> list[tuple[str, float, float]]:
    """``(doc id, added, updated)`` rows for an upsert at time ``t`` (now by default), each id once."""
    t = time.time() if t is None else t
    return [(d, t, t) for d in dict.fromkeys(doc_ids)]


def legacy_ids(pids: Iterable[str]) -> list[str]:
    """The registry ids of passages without document rows."""
    return [legacy_document_id(p) for p in pids]


def fill_sqlite(conn, passages_table: str = "store_passage") -> int:
    """Fill a just-created registry of a SQLite index (inside the caller's transaction): every documented
    id in the order its rows were stored, then the legacy passages. Returns the rows written."""
    t = time.time()
    ids = [r[0] for r in conn.execute("SELECT doc_id FROM documents WHERE pos = 0 ORDER BY rowid")]
    have = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (passages_table,)).fetchone()
    if have is not None:
        ids += legacy_ids(r[0] for r in conn.execute(_BARE.format(p=passages_table, d="documents")))
    conn.executemany(UPSERT.format(t=TABLE), rows(ids, t))
    return len(ids)


def fill_postgres(conn, q: str) -> int:
    """Fill a just-created registry of the PostgreSQL schema ``q`` (quoted; inside the caller's
    transaction, under the writer lock): documented ids by id (PostgreSQL keeps no insertion order), then
    the legacy passages. Returns the rows written."""
    ids = [r[0] for r in conn.execute(f"SELECT doc_id FROM {q}.documents WHERE pos = 0 ORDER BY doc_id")]
    if conn.execute("SELECT to_regclass(%s) IS NOT NULL", (f"{q}.store_passage",)).fetchone()[0]:
        ids += legacy_ids(r[0] for r in conn.execute(_BARE.format(p=f"{q}.store_passage", d=f"{q}.documents")))
    upsert_postgres(conn, q, ids)
    return len(ids)


def upsert_postgres(conn, q: str, doc_ids: Iterable[str], t: float | None = None) -> None:
    """Add or touch the registry rows of ``doc_ids`` in the PostgreSQL schema ``q``, in the given order."""
    got = rows(doc_ids, t)
    if got:
        conn.execute(f"INSERT INTO {q}.{TABLE} (doc_id, added, updated) SELECT d, %s, %s FROM unnest(%s::text[]) "
                     "WITH ORDINALITY AS u(d, n) ORDER BY n ON CONFLICT (doc_id) DO UPDATE SET updated = "
                     "excluded.updated", (got[0][1], got[0][1], [r[0] for r in got]))


__all__ = ["POSTGRES_COLUMNS", "SQLITE_COLUMNS", "TABLE", "UPSERT", "fill_postgres", "fill_sqlite", "legacy_ids",
           "rows", "upsert_postgres"]
