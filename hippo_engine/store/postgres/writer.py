"""The embedding stores a writer of a PostgreSQL index uses when its vectors stay in the database.

:class:`PostgresWriteStore` writes like :class:`~hippo_engine.store.postgres.vectors.PostgresEmbeddingStore`
but holds nothing that grows with the table: no vector, no text, no id. Whether ids are stored is
asked of the table (:meth:`~PostgresWriteStore.existing`: one query for many ids), and the answers
are remembered, and kept up to date by the store's own writes, until the next
:meth:`~PostgresWriteStore.reload` or :meth:`~PostgresWriteStore.forget` (a writer asks about the
same ids several times in one change, e.g. a phrase per triple); the row count is read when asked
after a write. What an index change needs of the vectors is read when it
is needed, inside the change's transaction: the vectors of given ids
(:meth:`~PostgresWriteStore.vectors_of`, e.g. a passage's sentences for its mean vector) and every
vector block by block in id order (:meth:`~PostgresWriteStore.blocks`, the synonymy kNN of new
entities, :func:`hippo_engine.index.synonymy.streamed_pairs`), whose rows
:meth:`~PostgresWriteStore.ids_at` names. ``ids`` (every id, sorted) is read from the table on
each use, for what rebuilds from everything. Used by an ``Index`` on PostgreSQL unless
``postgres_search="memory"``.
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

import numpy as np

from hippo_engine.store.base import StoreError
from hippo_engine.store.postgres.errors import guard_driver_errors
from hippo_engine.store.postgres.vectors import PostgresEmbeddingStore

#: rows fetched per round trip when reading ids or texts
ROWS_PER_FETCH = 100_000
#: ids per ``= ANY(...)`` query
IDS_PER_QUERY = 50_000


@guard_driver_errors()
class PostgresWriteStore(PostgresEmbeddingStore):
    """Writes to table ``store_<namespace>``; holds only the answers it was given since the last
    :meth:`reload` or :meth:`forget` (see the module documentation)."""

    holds_vectors = False     # the vectors stay in the database

    def reload(self) -> None:
        """Forget what is remembered (after a rolled-back transaction, or another writer's change)."""
        self._mat, self._texts, self._row, self._ids = None, None, None, None  # type: ignore[assignment]
        self._known: dict[str, bool] = {}
        self._count: int | None = None

    def forget(self) -> None:
        """Forget the remembered answers (the ids of one change: a writer calls this after it)."""
        self._known = {}
        self._count = None

    def _fetch(self, query: str, params: Sequence = ()) -> Iterator[tuple]:
        """Rows of ``query`` through a server-side cursor (caller holds a transaction)."""
        with self.db.conn.cursor(name=f"hippo_write_{self.namespace}") as cur:
            cur.itersize = ROWS_PER_FETCH
            cur.execute(query, params)
            while rows := cur.fetchmany(ROWS_PER_FETCH):
                yield from rows

    # ------------------------------------------------------------------ reading
    def __len__(self) -> int:
        if self._count is None:
            self._count = int(self.db.conn.execute(f"SELECT count(*) FROM {self.table}").fetchone()[0])
        return self._count

    def __contains__(self, key: str) -> bool:
        known = self._known.get(key)
        if known is None:
            known = self._known[key] = self.db.conn.execute(
                f"SELECT 1 FROM {self.table} WHERE id = %s", (key,)).fetchone() is not None
        return known

    def existing(self, keys: Iterable[str]) -> set[str]:
        """The ``keys`` the table holds (those not asked before in one query per ``IDS_PER_QUERY``;
        the answers are remembered)."""
        keys = list(dict.fromkeys(keys))
        ask = [k for k in keys if k not in self._known]
        for start in range(0, len(ask), IDS_PER_QUERY):
            part = ask[start:start + IDS_PER_QUERY]
            found = {r[0] for r in self.db.conn.execute(f"SELECT id FROM {self.table} WHERE id = ANY(%s)", (part,))}
            self._known.update((k, k in found) for k in part)
        return {k for k in keys if self._known[k]}

    @property
    def ids(self) -> np.ndarray:
        """Every id, sorted, read from the table now (for what rebuilds from everything)."""
        with self.db.snapshot():
            return np.array([k for k, in self._fetch(f"SELECT id FROM {self.table} ORDER BY id")], dtype=object)

    def ids_at(self, rows: Iterable[int]) -> dict[int, str]:
        """``{row: id}`` of the given rows of the id order (the rows of :meth:`blocks`), read in one
        query (rows past the end are left out)."""
        want = sorted({int(r) for r in rows})
        if not want:
            return {}
        return {int(r): k for r, k in self.db.conn.execute(
            f"SELECT r, id FROM (SELECT row_number() OVER (ORDER BY id) - 1 AS r, id FROM {self.table}) x "
            "WHERE r = ANY(%s)", (want,))}

    def row(self, key: str) -> int:
        raise StoreError(f"{self.db.location}: the {self.namespace} store of a writer numbers no rows in memory")

    @property
    def matrix(self) -> np.ndarray:
        raise StoreError(f"{self.db.location}: the {self.namespace} store of a writer holds no vectors in memory "
                         "(vectors_of() and blocks() read them)")

    def text(self, key: str) -> str:
        return self.texts([key])[0]

    def texts(self, keys: Iterable[str]) -> list[str]:
        keys = list(keys)
        found = self.texts_found(keys)
        missing = [k for k in keys if k not in found]
        if missing:
            raise KeyError(missing[0])
        return [found[k] for k in keys]

    def texts_found(self, keys: Iterable[str]) -> dict[str, str]:
        """``{id: text}`` of the ``keys`` the table holds, read now."""
        keys = list(dict.fromkeys(keys))
        out: dict[str, str] = {}
        for start in range(0, len(keys), IDS_PER_QUERY):
            out.update(self.db.conn.execute(f"SELECT id, content FROM {self.table} WHERE id = ANY(%s)",
                                            (keys[start:start + IDS_PER_QUERY],)).fetchall())
        return out

    def iter_texts(self) -> Iterator[tuple[str, str]]:
        with self.db.snapshot():
            yield from self._fetch(f"SELECT id, content FROM {self.table} ORDER BY id")

    def vectors_of(self, keys: Sequence[str]) -> np.ndarray:
        """(len(keys), dim) float32 vectors of ``keys``, in that order, read from the table."""
        keys = list(keys)
        out = np.empty((len(keys), self.dim), np.float32)
        if not keys:
            return out
        pos: dict[str, list[int]] = {}
        for i, k in enumerate(keys):
            pos.setdefault(k, []).append(i)
        uniq = list(pos)
        seen = 0
        for start in range(0, len(uniq), IDS_PER_QUERY):
            for k, vec in self.db.conn.execute(f"SELECT id, vec FROM {self.table} WHERE id = ANY(%s)",
                                               (uniq[start:start + IDS_PER_QUERY],), binary=True):
                out[pos[k]] = vec.to_numpy()
                seen += 1
        if seen != len(uniq):
            got = set(self.texts_found(uniq))
            raise KeyError(next(k for k in uniq if k not in got))
        return out

    def blocks(self, size: int = 65536) -> Iterator[tuple[int, np.ndarray]]:
        """Every vector in id order as ``(first row, float32 block)``; the blocks are the database
        reader's (``size`` is the in-memory stores' and is not used). :meth:`ids_at` names rows."""
        start = 0
        for block in self._vector_blocks(f"SELECT vec FROM {self.table} ORDER BY id"):
            yield start, block
            start += len(block)

    def nbytes(self) -> dict[str, int]:
        return {"ram": 0, "mapped": 0}

    # ------------------------------------------------------------------ writing
    def _upserted(self, last: dict[str, int], texts: Sequence[str], stored: np.ndarray) -> None:
        known = self._known
        for k in last:          # only answers given before are kept up to date: nothing else is added
            if k in known:
                known[k] = True
        self._count = None

    def delete(self, keys: Iterable[str]) -> None:
        """Remove the rows of ``keys`` (unknown keys are ignored)."""
        keys = list(dict.fromkeys(keys))
        if not keys:
            return
        with self.db.transaction() as c:
            for start in range(0, len(keys), IDS_PER_QUERY):
                c.execute(f"DELETE FROM {self.table} WHERE id = ANY(%s)", (keys[start:start + IDS_PER_QUERY],))
            self._deleted(keys)

    def _deleted(self, keys: list[str]) -> None:
        known = self._known
        for k in keys:
            if k in known:
                known[k] = False
        self._count = None


__all__ = ["PostgresWriteStore"]
