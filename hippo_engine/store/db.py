"""The index database: one SQLite file per index (``<save_dir>/index.sqlite``).

It holds the metadata, the embedding stores' rows (see :mod:`hippo_engine.store.vectors`), each
passage's facts (OpenIE triples or hyperedges) and the synonymy lists. One ``index()`` or
``delete()`` call is one SQLite transaction, so a crash mid-write leaves the previous state
readable; upserts and deletes touch only the rows they change.
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
import sqlite3
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from hippo_engine.datatypes import Hyperedge
from hippo_engine.ids import fact_id, triple_id
from hippo_engine.store import document_registry as registry
from hippo_engine.store.base import (
    ALL_STORE_NAMES,
    IndexStore,
    StoreError,
    encode_entities,
    hyperedges_by_passage,
    iter_chunks,
)
from hippo_engine.store.metadata import Filter, encode_metadata, sql_where

logger = logging.getLogger(__name__)

SCHEMA_VERSION = "1"


class IndexDB(IndexStore):
    """The SQLite file behind an index (the default :class:`IndexStore`)."""

    def __init__(self, path: Path):
        super().__init__()
        self.path = Path(path)
        self.location = str(self.path)
        self.shown_location = self.path.name          # the file lies in the index's folder
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self.conn = sqlite3.connect(str(self.path), timeout=60.0, isolation_level=None,
                                        check_same_thread=False)
            self._open()
        except sqlite3.DatabaseError as e:
            raise StoreError(f"cannot open index database {self.path}: {e}") from e
        self._file_id = self._current_file_id()

    def _open(self, patience: float = 60.0) -> None:
        """Check, set up WAL mode and create the tables. Another process opening or creating the
        same new index at the same moment can hold the file for an instant (switching to WAL does
        not wait on SQLite's busy handler): retry for up to ``patience`` seconds."""
        deadline = time.monotonic() + patience
        while True:
            try:
                self._refuse_foreign()
                if str(self.conn.execute("PRAGMA journal_mode").fetchone()[0]).lower() != "wal":
                    self.conn.execute("PRAGMA journal_mode=WAL")
                self.conn.execute("PRAGMA synchronous=NORMAL")
                self._create()
                return
            except sqlite3.OperationalError as e:
                if "locked" not in str(e) or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def _refuse_foreign(self) -> None:
        """Fail, before writing anything, on a SQLite file that holds tables but is not an index."""
        tables = {r[0] for r in self.conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        ours = "meta" in tables and self.conn.execute(
            "SELECT 1 FROM meta WHERE key='schema_version'").fetchone() is not None
        if tables and not ours:
            self.conn.close()
            shown = ", ".join(sorted(tables)[:5]) + (", ..." if len(tables) > 5 else "")
            raise StoreError(f"{self.path} is a SQLite database but not a hippo-engine index (its tables: "
                             f"{shown}); nothing was written to it. Use another save_dir.")

    _TABLES = ("meta", *(f"store_{ns}" for ns in ALL_STORE_NAMES), "passage_triples", "passage_hyperedges",
               "synonymy", "documents", "document_metadata", "communities", "community_reports",
               registry.TABLE)

    def _create(self) -> None:
        """Create what is missing, in one transaction (another process sees no half-made index);
        an index that has everything is only read."""
        c = self.conn
        have = {r[0] for r in c.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'index')")}
        if not (set(self._TABLES) | {"synonymy_dst", "documents_passage"}) <= have or \
                self.get_meta("schema_version") is None:
            c.execute("BEGIN IMMEDIATE")
            try:       # what exists, read again under the write lock (another process may have just made it)
                have = {r[0] for r in c.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'index')")}
                c.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
                for ns in ALL_STORE_NAMES:
                    c.execute(f"CREATE TABLE IF NOT EXISTS store_{ns} (id TEXT PRIMARY KEY, content TEXT NOT NULL,"
                              " vec BLOB NOT NULL)")
                c.execute("CREATE TABLE IF NOT EXISTS passage_triples (passage_id TEXT NOT NULL, pos INTEGER "
                          "NOT NULL, subj TEXT NOT NULL, pred TEXT NOT NULL, obj TEXT NOT NULL, "
                          "PRIMARY KEY (passage_id, pos))")
                c.execute("CREATE TABLE IF NOT EXISTS passage_hyperedges (passage_id TEXT NOT NULL, pos INTEGER "
                          "NOT NULL, text TEXT NOT NULL, entities TEXT NOT NULL, PRIMARY KEY (passage_id, pos))")
                c.execute("CREATE TABLE IF NOT EXISTS synonymy (src TEXT NOT NULL, dst TEXT NOT NULL, "
                          "score REAL NOT NULL, PRIMARY KEY (src, dst))")
                c.execute("CREATE INDEX IF NOT EXISTS synonymy_dst ON synonymy (dst)")
                c.execute("CREATE TABLE IF NOT EXISTS documents (doc_id TEXT NOT NULL, pos INTEGER NOT NULL, "
                          "passage_id TEXT NOT NULL, PRIMARY KEY (doc_id, pos))")
                c.execute("CREATE INDEX IF NOT EXISTS documents_passage ON documents (passage_id)")
                c.execute("CREATE TABLE IF NOT EXISTS document_metadata (doc_id TEXT PRIMARY KEY, "
                          "metadata TEXT NOT NULL)")
                if registry.TABLE not in have:      # an index from before the registry: fill it now
                    c.execute(f"CREATE TABLE {registry.TABLE} ({registry.SQLITE_COLUMNS})")
                    filled = registry.fill_sqlite(c)
                    if filled:
                        logger.info("%s: document registry filled with %d document(s)", self.path, filled)
                c.execute("CREATE TABLE IF NOT EXISTS communities (id TEXT PRIMARY KEY, level INTEGER NOT NULL,"
                          " parent TEXT, data TEXT NOT NULL)")
                c.execute("CREATE TABLE IF NOT EXISTS community_reports (member_key TEXT PRIMARY KEY, "
                          "report TEXT NOT NULL, source TEXT NOT NULL)")
                if self.get_meta("schema_version") is None:
                    self.set_meta("schema_version", SCHEMA_VERSION)
                c.execute("COMMIT")
            except BaseException:
                c.execute("ROLLBACK")
                raise
        if self.get_meta("schema_version") != SCHEMA_VERSION:
            raise StoreError(f"{self.path} has schema version {self.get_meta('schema_version')}, "
                             f"this hippo-engine reads {SCHEMA_VERSION}")

    def _current_file_id(self) -> tuple[int, int] | None:
        """(device, inode) of the database file now (None: there is no file at its path)."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return None
        return st.st_dev, st.st_ino

    def _refuse_lost_file(self) -> None:
        """Refuse to write when the file this connection opened was deleted or replaced: the
        writes would go to a file nobody will open again."""
        if self._current_file_id() != self._file_id:
            raise StoreError(f"{self.path} was deleted or replaced while this index was open; nothing was "
                             "written. Open the index again (restore the file first if it was deleted by mistake).")

    def _begin(self) -> None:
        self._refuse_lost_file()
        self.conn.execute("BEGIN IMMEDIATE")

    def _commit(self) -> None:
        self.conn.execute("COMMIT")

    def _rollback(self) -> None:
        self.conn.execute("ROLLBACK")

    def _connection(self) -> sqlite3.Connection:
        return self.conn

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[sqlite3.Connection]:
        """Reads inside see one committed state (a read transaction; within a write transaction,
        that transaction's state), whatever other processes commit meanwhile."""
        if self._depth or self.conn.in_transaction:
            yield self.conn
            return
        self.conn.execute("BEGIN")
        try:
            yield self.conn
        finally:
            self.conn.execute("COMMIT")

    def get_meta(self, key: str) -> str | None:
        row = self.conn.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return None if row is None else row[0]

    def set_meta(self, key: str, value: str) -> None:
        self.conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, value))

    # --- passages ---------------------------------------------------------------------------
    def passage_ids(self) -> list[str]:
        return [r[0] for r in self.conn.execute("SELECT id FROM store_passage")]

    def has_passage(self, pid: str) -> bool:
        return self.conn.execute("SELECT 1 FROM store_passage WHERE id=?", (pid,)).fetchone() is not None

    def passage_count(self) -> int:
        return int(self.conn.execute("SELECT COUNT(*) FROM store_passage").fetchone()[0])

    # --- passage -> normalised triples ---------------------------------------------------
    def load_passage_triples(self) -> dict[str, list[tuple[str, str, str]]]:
        out: dict[str, list[tuple[str, str, str]]] = {}
        for pid, s, p, o in self.conn.execute(
                "SELECT passage_id, subj, pred, obj FROM passage_triples ORDER BY passage_id, pos"):
            out.setdefault(pid, []).append((s, p, o))
        return out

    def put_passage_triples(self, pid: str, triples: Sequence[tuple[str, str, str]]) -> None:
        self.conn.execute("DELETE FROM passage_triples WHERE passage_id=?", (pid,))
        self.conn.executemany("INSERT INTO passage_triples VALUES (?, ?, ?, ?, ?)",
                              [(pid, i, s, p, o) for i, (s, p, o) in enumerate(triples)])

    def delete_passage_triples(self, pids: Iterable[str]) -> None:
        self.conn.executemany("DELETE FROM passage_triples WHERE passage_id=?", [(p,) for p in pids])

    # --- passage -> hyperedges (sentences / n-ary facts and their entities) -----------------
    def load_passage_hyperedges(self) -> dict[str, list[Hyperedge]]:
        return hyperedges_by_passage(self.conn.execute(
            "SELECT passage_id, text, entities FROM passage_hyperedges ORDER BY passage_id, pos"), self.path)

    def put_passage_hyperedges(self, pid: str, hyperedges: Sequence[Hyperedge]) -> None:
        self.conn.execute("DELETE FROM passage_hyperedges WHERE passage_id=?", (pid,))
        self.conn.executemany("INSERT INTO passage_hyperedges VALUES (?, ?, ?, ?)",
                              [(pid, i, h.text, encode_entities(h.entities)) for i, h in enumerate(hyperedges)])

    def delete_passage_hyperedges(self, pids: Iterable[str]) -> None:
        self.conn.executemany("DELETE FROM passage_hyperedges WHERE passage_id=?", [(p,) for p in pids])

    # --- synonymy lists ------------------------------------------------------------------
    def load_synonymy(self) -> dict[str, dict[str, float]]:
        out: dict[str, dict[str, float]] = {}
        for s, d, w in self.conn.execute("SELECT src, dst, score FROM synonymy"):
            out.setdefault(s, {})[d] = w
        return out

    def replace_synonymy_lists(self, lists: Mapping[str, Mapping[str, float]]) -> None:
        """Overwrite the neighbour lists of the given sources (an empty dict clears one)."""
        self.conn.executemany("DELETE FROM synonymy WHERE src=?", [(s,) for s in lists])
        self.conn.executemany("INSERT INTO synonymy VALUES (?, ?, ?)",
                              [(s, d, w) for s, nb in lists.items() for d, w in nb.items()])

    # --- documents ------------------------------------------------------------------------
    def put_documents(self, docs: Mapping[str, Sequence[str]]) -> None:
        self.conn.executemany("DELETE FROM documents WHERE doc_id=?", [(d,) for d in docs])
        self.conn.executemany("INSERT INTO documents VALUES (?, ?, ?)",
                              [(d, i, p) for d, pids in docs.items() for i, p in enumerate(pids)])
        self.register_documents(docs)

    def register_documents(self, doc_ids: Iterable[str]) -> None:
        self.conn.executemany(registry.UPSERT.format(t=registry.TABLE), registry.rows(doc_ids))

    def unregister_documents(self, doc_ids: Iterable[str]) -> None:
        self.conn.executemany(f"DELETE FROM {registry.TABLE} WHERE doc_id=?", [(d,) for d in dict.fromkeys(doc_ids)])

    def document_count(self) -> int:
        return int(self.conn.execute(f"SELECT COUNT(*) FROM {registry.TABLE}").fetchone()[0])

    def document_page(self, offset: int = 0, limit: int = 50) -> list[tuple[str, float, float]]:
        return [tuple(r) for r in self.conn.execute(f"SELECT doc_id, added, updated FROM {registry.TABLE} "
                                                    "ORDER BY seq LIMIT ? OFFSET ?", (limit, offset))]

    def document_passages(self, doc_ids: Iterable[str]) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for part in iter_chunks(list(dict.fromkeys(doc_ids)), 500):
            marks = ",".join("?" * len(part))
            for d, p in self.conn.execute(f"SELECT doc_id, passage_id FROM documents WHERE doc_id IN ({marks}) "
                                          "ORDER BY doc_id, pos", list(part)):
                out.setdefault(d, []).append(p)
        return out

    def passage_documents(self, pids: Iterable[str]) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for part in iter_chunks(list(dict.fromkeys(pids)), 500):
            marks = ",".join("?" * len(part))
            for p, d in self.conn.execute(f"SELECT passage_id, doc_id FROM documents WHERE passage_id IN ({marks}) "
                                          "ORDER BY passage_id, doc_id", list(part)):
                out.setdefault(p, []).append(d)
        return out

    def delete_documents(self, doc_ids: Iterable[str]) -> None:
        keys = [(d,) for d in dict.fromkeys(doc_ids)]
        self.conn.executemany("DELETE FROM documents WHERE doc_id=?", keys)
        self.conn.executemany("DELETE FROM document_metadata WHERE doc_id=?", keys)
        self.conn.executemany(f"DELETE FROM {registry.TABLE} WHERE doc_id=?", keys)

    # --- document metadata (see hippo_engine.store.metadata) -------------------------------
    def put_document_metadata(self, metadata: Mapping[str, Mapping[str, Any]]) -> None:
        with self.transaction():
            self.conn.executemany("DELETE FROM document_metadata WHERE doc_id=?",
                                  [(d,) for d, m in metadata.items() if not m])
            self.conn.executemany("INSERT OR REPLACE INTO document_metadata VALUES (?, ?)",
                                  [(d, encode_metadata(m)) for d, m in metadata.items() if m])

    def document_metadata(self, doc_ids: Iterable[str]) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        for part in iter_chunks(list(dict.fromkeys(doc_ids)), 500):
            marks = ",".join("?" * len(part))
            for d, text in self.conn.execute(f"SELECT doc_id, metadata FROM document_metadata WHERE doc_id IN "
                                             f"({marks})", list(part)):
                out[d] = self._metadata(d, text)
        return out

    def _metadata(self, doc_id: str, text: str) -> dict[str, Any]:
        try:
            return json.loads(text)
        except ValueError as e:
            raise StoreError(f"{self.path}: unreadable metadata of document {doc_id!r}: {e}") from e

    def matching_documents(self, where: Filter) -> dict[str, list[str]]:
        cond, params = sql_where(where, "sqlite", "m.metadata")
        out: dict[str, list[str]] = {}
        for d, p in self.conn.execute("SELECT m.doc_id, d.passage_id FROM document_metadata m JOIN documents d "
                                      f"ON d.doc_id = m.doc_id WHERE {cond} ORDER BY m.doc_id, d.pos", params):
            out.setdefault(d, []).append(p)
        return out

    def passage_fact_ids(self, pids: Iterable[str]) -> set[str]:
        out: set[str] = set()
        for part in iter_chunks(list(dict.fromkeys(pids)), 500):
            marks = ",".join("?" * len(part))
            out.update(triple_id(t) for t in self.conn.execute(
                f"SELECT subj, pred, obj FROM passage_triples WHERE passage_id IN ({marks})", list(part)))
            out.update(fact_id(r[0]) for r in self.conn.execute(
                f"SELECT text FROM passage_hyperedges WHERE passage_id IN ({marks})", list(part)))
        return out

    # --- communities (HiRAG) -------------------------------------------------------------
    def load_community_rows(self) -> list[str]:
        return [r[0] for r in self.conn.execute("SELECT data FROM communities ORDER BY level, id")]

    def load_report_rows(self) -> list[tuple[str, str]]:
        return [(k, r) for k, r in self.conn.execute("SELECT member_key, report FROM community_reports")]

    def replace_communities(self, rows: Sequence[tuple[str, int, str | None, str]],
                            reports: Sequence[tuple[str, str, str]]) -> None:
        c = self.conn
        c.execute("DELETE FROM communities")
        c.executemany("INSERT INTO communities VALUES (?, ?, ?, ?)", list(rows))
        c.execute("DELETE FROM community_reports")
        c.executemany("INSERT INTO community_reports VALUES (?, ?, ?)", list(reports))

    # --- vectors and lifetime ---------------------------------------------------------------
    def embedding_store(self, namespace: str, dim: int, **options):
        from hippo_engine.store.vectors import SQLiteEmbeddingStore
        return SQLiteEmbeddingStore(self, namespace, dim, **options)

    def close(self) -> None:
        self.conn.close()
