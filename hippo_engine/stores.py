"""Persistent storage: embedding stores and the passage->triples table, in one SQLite file.

Everything the index holds lives in ``<save_dir>/index.sqlite``. One ``index()`` or
``delete()`` call is one SQLite transaction, so a crash mid-write leaves the previous state
readable; upserts and deletes touch only the rows they change (no full rewrite).

``EmbeddingStore`` is the typed interface; ``SQLiteEmbeddingStore`` implements it and keeps an
in-memory matrix whose rows are sorted by id, so the same content gives the same matrix
whatever order it was inserted in.
"""
from __future__ import annotations

import contextlib
import logging
import sqlite3
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Iterable, Iterator, Optional, Sequence

import numpy as np

logger = logging.getLogger(__name__)

SCHEMA_VERSION = "1"
STORE_NAMES = ("passage", "entity", "fact")


class StoreError(RuntimeError):
    """The on-disk index is unreadable or belongs to another configuration."""


class EmbeddingStore(ABC):
    """Texts keyed by id, each with an L2-normalised vector."""

    namespace: str
    dim: int

    @abstractmethod
    def __len__(self) -> int: ...

    @abstractmethod
    def __contains__(self, key: str) -> bool: ...

    @property
    @abstractmethod
    def ids(self) -> np.ndarray:
        """All ids, sorted (array of str)."""

    @property
    @abstractmethod
    def matrix(self) -> np.ndarray:
        """(len, dim) float32 matrix, rows in the order of ``ids``."""

    @abstractmethod
    def row(self, key: str) -> int: ...

    @abstractmethod
    def text(self, key: str) -> str: ...

    @abstractmethod
    def upsert(self, keys: Sequence[str], texts: Sequence[str], vectors: np.ndarray) -> None: ...

    @abstractmethod
    def delete(self, keys: Iterable[str]) -> None: ...


class IndexDB:
    """The SQLite file behind an index, with a transaction context manager."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self.conn = sqlite3.connect(str(self.path), isolation_level=None, check_same_thread=False)
            self.conn.execute("PRAGMA journal_mode=WAL")
            self.conn.execute("PRAGMA synchronous=NORMAL")
            self._create()
        except sqlite3.DatabaseError as e:
            raise StoreError(f"cannot open index database {self.path}: {e}") from e
        self._depth = 0

    def _create(self) -> None:
        c = self.conn
        c.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        for ns in STORE_NAMES:
            c.execute(f"CREATE TABLE IF NOT EXISTS store_{ns} (id TEXT PRIMARY KEY, content TEXT NOT NULL,"
                      " vec BLOB NOT NULL)")
        c.execute("CREATE TABLE IF NOT EXISTS passage_triples (passage_id TEXT NOT NULL, pos INTEGER NOT NULL,"
                  " subj TEXT NOT NULL, pred TEXT NOT NULL, obj TEXT NOT NULL, PRIMARY KEY (passage_id, pos))")
        c.execute("CREATE TABLE IF NOT EXISTS synonymy (src TEXT NOT NULL, dst TEXT NOT NULL, score REAL NOT NULL,"
                  " PRIMARY KEY (src, dst))")
        c.execute("CREATE INDEX IF NOT EXISTS synonymy_dst ON synonymy (dst)")
        if self.get_meta("schema_version") is None:
            self.set_meta("schema_version", SCHEMA_VERSION)
        elif self.get_meta("schema_version") != SCHEMA_VERSION:
            raise StoreError(f"{self.path} has schema version {self.get_meta('schema_version')}, "
                             f"this hippo-engine reads {SCHEMA_VERSION}")

    @contextlib.contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """All writes inside are committed together or not at all (nesting allowed)."""
        if self._depth == 0:
            self.conn.execute("BEGIN IMMEDIATE")
        self._depth += 1
        try:
            yield self.conn
        except BaseException:
            self._depth -= 1
            if self._depth == 0:
                self.conn.execute("ROLLBACK")
            raise
        else:
            self._depth -= 1
            if self._depth == 0:
                self.conn.execute("COMMIT")

    def get_meta(self, key: str) -> Optional[str]:
        row = self.conn.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return None if row is None else row[0]

    def set_meta(self, key: str, value: str) -> None:
        self.conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, value))

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

    # --- synonymy lists ------------------------------------------------------------------
    def load_synonymy(self) -> dict[str, dict[str, float]]:
        out: dict[str, dict[str, float]] = {}
        for s, d, w in self.conn.execute("SELECT src, dst, score FROM synonymy"):
            out.setdefault(s, {})[d] = w
        return out

    def replace_synonymy_lists(self, lists: dict[str, dict[str, float]]) -> None:
        """Overwrite the neighbour lists of the given sources (an empty dict clears one)."""
        self.conn.executemany("DELETE FROM synonymy WHERE src=?", [(s,) for s in lists])
        self.conn.executemany("INSERT INTO synonymy VALUES (?, ?, ?)",
                              [(s, d, w) for s, nb in lists.items() for d, w in nb.items()])

    def close(self) -> None:
        self.conn.close()


class SQLiteEmbeddingStore(EmbeddingStore):
    """An ``EmbeddingStore`` in one table of an ``IndexDB``, mirrored in memory."""

    def __init__(self, db: IndexDB, namespace: str, dim: int):
        if namespace not in STORE_NAMES:
            raise ValueError(f"unknown store {namespace!r}")
        self.db, self.namespace, self.dim = db, namespace, dim
        self.table = f"store_{namespace}"
        self.reload()

    def reload(self) -> None:
        """Re-read the table (after a rolled-back transaction, for instance)."""
        ids, texts, vecs = [], {}, []
        for key, content, blob in self.db.conn.execute(f"SELECT id, content, vec FROM {self.table} ORDER BY id"):
            v = np.frombuffer(blob, dtype=np.float32)
            if v.shape[0] != self.dim:
                raise StoreError(f"{self.namespace} store holds {v.shape[0]}-dim vectors but the encoder gives "
                                 f"{self.dim}; use the embedding model the index was built with, or a new save_dir")
            ids.append(key)
            texts[key] = content
            vecs.append(v)
        self._ids = np.array(ids, dtype=object)
        self._texts = texts
        self._mat = np.vstack(vecs).astype(np.float32, copy=False) if vecs else np.zeros((0, self.dim), np.float32)
        self._row = {k: i for i, k in enumerate(ids)}

    def __len__(self) -> int:
        return len(self._ids)

    def __contains__(self, key: str) -> bool:
        return key in self._row

    @property
    def ids(self) -> np.ndarray:
        return self._ids

    @property
    def matrix(self) -> np.ndarray:
        return self._mat

    def row(self, key: str) -> int:
        return self._row[key]

    def text(self, key: str) -> str:
        return self._texts[key]

    def texts(self, keys: Iterable[str]) -> list[str]:
        return [self._texts[k] for k in keys]

    def upsert(self, keys: Sequence[str], texts: Sequence[str], vectors: np.ndarray) -> None:
        if not (len(keys) == len(texts) == len(vectors)):
            raise ValueError("keys, texts and vectors must have the same length")
        if len(keys) == 0:
            return
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        if vectors.ndim != 2 or vectors.shape[1] != self.dim:
            raise ValueError(f"vectors must have shape (n, {self.dim})")
        self.db.conn.executemany(f"INSERT OR REPLACE INTO {self.table} (id, content, vec) VALUES (?, ?, ?)",
                                 [(k, t, v.tobytes()) for k, t, v in zip(keys, texts, vectors)])
        # memory: replace existing rows in place, merge new ones keeping id order
        new_keys, new_rows = [], []
        for k, t, v in zip(keys, texts, vectors):
            self._texts[k] = t
            if k in self._row:
                self._mat[self._row[k]] = v
            else:
                new_keys.append(k)
                new_rows.append(v)
        if new_keys:
            all_ids = np.concatenate([self._ids, np.array(new_keys, dtype=object)])
            all_mat = np.vstack([self._mat, np.vstack(new_rows)])
            order = np.argsort(all_ids.astype(str), kind="stable")
            self._ids, self._mat = all_ids[order], np.ascontiguousarray(all_mat[order])
            self._row = {k: i for i, k in enumerate(self._ids)}

    def delete(self, keys: Iterable[str]) -> None:
        keys = [k for k in set(keys) if k in self._row]
        if not keys:
            return
        self.db.conn.executemany(f"DELETE FROM {self.table} WHERE id=?", [(k,) for k in keys])
        drop = np.zeros(len(self._ids), bool)
        drop[[self._row[k] for k in keys]] = True
        for k in keys:
            del self._texts[k]
        self._ids, self._mat = self._ids[~drop], np.ascontiguousarray(self._mat[~drop])
        self._row = {k: i for i, k in enumerate(self._ids)}
