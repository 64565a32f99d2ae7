"""The embedding stores a writer of a PostgreSQL index uses when its vectors stay in the database.

:class:`PostgresWriteStore` writes like :class:`~hippo_engine.store.postgres.vectors.PostgresEmbeddingStore`
but holds only the sorted ids (an object array: membership and row numbers by binary search):
no vector, no text and no id->row dict in memory. What an index change needs of the vectors is
read when it is needed, inside the change's transaction: the vectors of given ids
(:meth:`~PostgresWriteStore.vectors_of`, e.g. a passage's sentences for its mean vector) and every
vector block by block in id order (:meth:`~PostgresWriteStore.blocks`, the synonymy kNN of new
entities, :func:`hippo_engine.index.synonymy.streamed_pairs`). Used by an ``Index`` on PostgreSQL
unless ``postgres_search="memory"``.
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

import numpy as np

from hippo_engine.store.base import StoreError
from hippo_engine.store.postgres.errors import guard_driver_errors
from hippo_engine.store.postgres.vectors import PostgresEmbeddingStore

#: rows fetched per round trip when reading ids or texts
ROWS_PER_FETCH = 100_000


@guard_driver_errors()
class PostgresWriteStore(PostgresEmbeddingStore):
    """Writes to table ``store_<namespace>``; keeps only the sorted ids in memory."""

    holds_vectors = False     # the vectors stay in the database

    def reload(self) -> None:
        """Re-read the ids (after a rolled-back transaction, for instance)."""
        self._mat, self._texts, self._row = None, None, None  # type: ignore[assignment]  # nothing held
        with self.db.snapshot():
            self._ids = np.array([k for k, in self._fetch(f"SELECT id FROM {self.table} ORDER BY id")], dtype=object)

    def _fetch(self, query: str) -> Iterator[tuple]:
        """Rows of ``query`` through a server-side cursor (caller holds a transaction)."""
        with self.db.conn.cursor(name=f"hippo_write_{self.namespace}") as cur:
            cur.itersize = ROWS_PER_FETCH
            cur.execute(query)
            while rows := cur.fetchmany(ROWS_PER_FETCH):
                yield from rows

    # ------------------------------------------------------------------ reading
    def __contains__(self, key: str) -> bool:
        pos = int(np.searchsorted(self._ids, key)) if len(self._ids) else 0
        return pos < len(self._ids) and self._ids[pos] == key

    def row(self, key: str) -> int:
        pos = int(np.searchsorted(self._ids, key)) if len(self._ids) else 0
        if pos >= len(self._ids) or self._ids[pos] != key:
            raise KeyError(key)
        return pos

    def existing(self, keys: Iterable[str]) -> set[str]:
        return {k for k in keys if k in self}

    @property
    def matrix(self) -> np.ndarray:
        raise StoreError(f"{self.db.location}: the {self.namespace} store of a writer holds no vectors in memory "
                         "(vectors_of() and blocks() read them)")

    def text(self, key: str) -> str:
        return self.texts([key])[0]

    def texts(self, keys: Iterable[str]) -> list[str]:
        keys = list(keys)
        found = dict(self.db.conn.execute(f"SELECT id, content FROM {self.table} WHERE id = ANY(%s)",
                                          (list(dict.fromkeys(keys)),)).fetchall()) if keys else {}
        missing = [k for k in keys if k not in found]
        if missing:
            raise KeyError(missing[0])
        return [found[k] for k in keys]

    def iter_texts(self) -> Iterator[tuple[str, str]]:
        with self.db.snapshot():
            yield from self._fetch(f"SELECT id, content FROM {self.table} ORDER BY id")

    def vectors_of(self, keys: Sequence[str]) -> np.ndarray:
        """(len(keys), dim) float32 vectors of ``keys``, in that order, read from the table."""
        keys = list(keys)
        out = np.empty((len(keys), self.dim), np.float32)
        if not keys:
            return out
        got = dict(self.db.conn.execute(f"SELECT id, vec FROM {self.table} WHERE id = ANY(%s)",
                                        (list(dict.fromkeys(keys)),), binary=True).fetchall())
        for i, k in enumerate(keys):
            if k not in got:
                raise KeyError(k)
            out[i] = got[k].to_numpy()
        return out

    def blocks(self, size: int = 65536) -> Iterator[tuple[int, np.ndarray]]:
        """Every vector in id order (the order of ``ids``) as ``(first row, float32 block)``; the
        blocks are the database reader's (``size`` is the in-memory stores' and is not used)."""
        start = 0
        for block in self._vector_blocks(f"SELECT vec FROM {self.table} ORDER BY id"):
            yield start, block
            start += len(block)

    def nbytes(self) -> dict[str, int]:
        return {"ram": 0, "mapped": 0}

    # ------------------------------------------------------------------ writing
    def _upserted(self, last: dict[str, int], texts: Sequence[str], stored: np.ndarray) -> None:
        new = sorted(k for k in last if k not in self)
        if new:
            new_ids = np.array(new, dtype=object)
            self._ids = np.insert(self._ids, np.searchsorted(self._ids, new_ids) if len(self._ids) else 0, new_ids)

    def _deleted(self, keys: list[str]) -> None:
        gone = set(keys)
        self._ids = np.array([k for k in self._ids if k not in gone], dtype=object)


__all__ = ["PostgresWriteStore"]
