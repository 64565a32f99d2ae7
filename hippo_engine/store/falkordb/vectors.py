"""The embedding stores of a FalkorDB index: :class:`FalkorEmbeddingStore`.

A store's rows are nodes of one label (:data:`~.vector_index.LABELS`: passages, entities, fact texts,
community summaries) holding the id, the text and the vector twice: ``embedding``, a ``vecf32`` property
under a FalkorDB vector index (cosine) made by the first write, so that a user's Cypher can search them
(``CALL db.idx.vector.queryNodes('Entity', 'embedding', k, vecf32($q))``), and ``vector``, the stored
dtype's bytes (float32, or float16 with ``vector_dtype="float16"``, values rounded) in base64, which is
what the engine reads back: one string per node instead of one reply per number (the client parses a
12,934 x 384 entity store in 18 s as numbers, well under a second as strings), and the bytes that were
written, so the matrix is bit-identical to SQLite's. A write removes a node's old ``embedding`` before it
sets the new one (FalkorDB 4 may keep the old value when a ``vecf32`` property is set over another).
A write that deletes vectors or sets new ones over old ones leaves dead entries in the vector index, so
it asks its transaction to rebuild the index at commit (:mod:`.vector_index`).
Every vector is mirrored in memory, rows sorted by id (Python's order), as the SQLite store keeps them.
"""
from __future__ import annotations

import base64
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from hippo_engine.store import embedding_store as base
from hippo_engine.store.base import ALL_STORE_NAMES, StoreError, iter_chunks
from hippo_engine.store.falkordb.vector_index import LABELS, index_statement, vector_indexes

#: rows per ``UNWIND`` batch
BATCH = 2000


class FalkorEmbeddingStore(base.MirroredStore):
    """The store ``namespace`` of the FalkorDB index ``db`` (a :class:`~.store.FalkorIndexStore`),
    ``dim``-dimensional. ``mmap``/``mmap_dir`` (options of the SQLite store) are accepted and ignored."""

    def __init__(self, db: Any, namespace: str, dim: int, *, vector_dtype: str = "float32", mmap: bool = False,
                 mmap_dir=None):
        if namespace not in ALL_STORE_NAMES:
            raise ValueError(f"unknown store {namespace!r}")
        if vector_dtype not in base.VECTOR_DTYPES:
            raise ValueError(f"vector_dtype must be one of {base.VECTOR_DTYPES}, got {vector_dtype!r}")
        self.db, self.namespace, self.dim = db, namespace, dim
        self.label, self.text_prop = LABELS[namespace]
        self.vector_dtype = np.dtype(vector_dtype)
        self._indexed = False
        self.reload()

    def reload(self) -> None:
        """Read every row of the store (ids in Python's order)."""
        rows = self.db.q(f"load the {self.namespace} store", f"MATCH (n:{self.label}) WHERE n.embedding IS NOT NULL "
                         f"RETURN n.id, n.{self.text_prop}, n.vector")
        rows.sort(key=lambda r: r[0])
        mat = np.empty((len(rows), self.dim), dtype=np.float32)
        for i, (key, _, vec) in enumerate(rows):
            if not isinstance(vec, (str, bytes)):
                raise StoreError(f"{self.db.location}: the {self.namespace} vector of {key!r} has no stored bytes "
                                 "(an index written by a development version of the FalkorDB backend before "
                                 "2026-11-29); build it again, or export it from the folder it came from")
            mat[i] = self._decode(base64.b64decode(vec))
        self._ids = np.array([r[0] for r in rows], dtype=object)
        self._texts = {r[0]: r[1] for r in rows}
        self._mat = mat
        self._row = {k: i for i, k in enumerate(self._ids)}

    def _decode(self, blob: bytes) -> np.ndarray:
        """One stored vector (float32 or float16 bytes, told apart by their length)."""
        if len(blob) == 4 * self.dim:
            return np.frombuffer(blob, dtype=np.float32)
        if len(blob) == 2 * self.dim:
            return np.frombuffer(blob, dtype=np.float16)
        have = len(blob) // 4 if len(blob) % 4 == 0 else len(blob) / 2
        raise StoreError(f"{self.namespace} store holds {have:g}-dim vectors but the encoder gives "
                         f"{self.dim}; use the embedding model the index was built with, or a new save_dir")

    def nbytes(self) -> dict[str, int]:
        """Bytes of the vectors: ``ram`` (the in-memory matrix), ``mapped`` (always 0)."""
        return {"ram": int(self._mat.nbytes), "mapped": 0}

    # ------------------------------------------------------------------ writing
    def _ensure_index(self) -> None:
        """Make the label's vector index (inside the write's transaction) unless it exists."""
        if self._indexed:
            return
        if (self.label, self.dim) not in vector_indexes(self.db):
            self.db.w("create a vector index", index_statement(self.label, self.dim))
        self._indexed = True

    def upsert(self, keys: Sequence[str], texts: Sequence[str], vectors: np.ndarray) -> None:
        stored = base.stored_rows(keys, texts, vectors, self.dim, self.vector_dtype)
        if stored is None:
            return
        last = base.last_positions(keys)
        values = stored.astype(np.float32)
        rows = [{"id": k, "t": texts[i], "v": NumberList(values[i]),
                 "b": base64.b64encode(stored[i].tobytes()).decode()} for k, i in last.items()]
        with self.db.transaction():
            self._ensure_index()
            if any(k in self._row for k in last):
                self.db.stale_vector_index(self.label, self.dim)
            for part in iter_chunks(rows, BATCH):
                self.db.w(f"write the {self.namespace} store", f"UNWIND $rows AS r MERGE (n:{self.label} {{id: r.id}}) "
                          f"REMOVE n.embedding SET n.{self.text_prop} = r.t, n.vector = r.b, n.embedding = vecf32(r.v)",
                          rows=list(part))
        self._to_ram()
        base.upsert_mirror(self, last, texts, stored)

    def delete(self, keys: Iterable[str]) -> None:
        keys = [k for k in set(keys) if k in self._row]
        if not keys:
            return
        drop_text = "" if self.label == "Entity" else f", n.{self.text_prop} = NULL"
        with self.db.transaction():
            for part in iter_chunks(sorted(keys), BATCH):
                self.db.w(f"delete from the {self.namespace} store", f"MATCH (n:{self.label}) WHERE n.id IN $ids "
                          f"SET n.embedding = NULL, n.vector = NULL{drop_text}", ids=list(part))
            self.db.w(f"delete from the {self.namespace} store", f"MATCH (n:{self.label}) WHERE n.embedding IS NULL "
                      "AND NOT (n)--() DELETE n")
            self.db.stale_vector_index(self.label, self.dim)
        self._to_ram()
        base.delete_from_mirror(self, keys)

    def _to_ram(self) -> None:
        if not self._mat.flags.writeable:
            self._mat = np.array(self._mat, dtype=np.float32)


class NumberList:
    """A vector as a query parameter, its Cypher list literal written once (the client writes a value it
    does not know as ``str(value)``; its own writing of a list checks the type of every number, which
    took most of a write's time)."""

    __slots__ = ("text",)

    def __init__(self, values: np.ndarray):
        self.text = "[" + ",".join(map(repr, values.tolist())) + "]"

    def __str__(self) -> str:
        return self.text


__all__ = ["BATCH", "FalkorEmbeddingStore", "NumberList"]
