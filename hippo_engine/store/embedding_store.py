"""What every backend's embedding store shares: the interface (:class:`EmbeddingStore`), the in-memory
mirror of its rows (:class:`MirroredStore`) and the steps that keep the mirror in step with a write
(:func:`stored_rows`, :func:`last_positions`, :func:`upsert_mirror`, :func:`delete_from_mirror`).

The SQLite store is :class:`~hippo_engine.store.vectors.SQLiteEmbeddingStore`; the PostgreSQL and
FalkorDB ones live in their backends' packages. Every name here is also importable from
:mod:`hippo_engine.store.vectors`.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence

import numpy as np

VECTOR_DTYPES = ("float32", "float16")


class EmbeddingStore(ABC):
    """Texts keyed by id, each with an L2-normalised vector."""

    namespace: str
    dim: int
    #: whether ``matrix`` holds every vector (False: they stay in the backend; a writer reads them
    #: with ``blocks()``/``vectors_of()``, retrieval asks the backend for top-k: ``extremes()``)
    holds_vectors = True

    @abstractmethod
    def __len__(self) -> int: ...

    @abstractmethod
    def __contains__(self, key: str) -> bool: ...

    @abstractmethod
    def reload(self) -> None:
        """Re-read what the store holds from its backend (after another process wrote it, or a
        rolled-back transaction)."""

    def forget(self) -> None:
        """Forget the answers remembered about which ids the store holds (a writer calls this after
        each change, so what it holds does not grow from change to change); a no-op for a store
        that holds all its rows in memory."""
        return None

    @property
    @abstractmethod
    def ids(self) -> np.ndarray:
        """All ids, sorted (array of str)."""

    @property
    @abstractmethod
    def matrix(self) -> np.ndarray:
        """(len, dim) matrix, rows in the order of ``ids``: float32, or the storage dtype
        (float16) for a memory-mapped store; ``matrix @ q`` with a float32 ``q`` gives float32."""

    @abstractmethod
    def row(self, key: str) -> int: ...

    @abstractmethod
    def text(self, key: str) -> str: ...

    @abstractmethod
    def upsert(self, keys: Sequence[str], texts: Sequence[str], vectors: np.ndarray) -> None: ...

    @abstractmethod
    def delete(self, keys: Iterable[str]) -> None: ...


class MirroredStore(EmbeddingStore):
    """An ``EmbeddingStore`` that keeps a mirror of its rows in memory: ``_ids`` (sorted, an object
    array), ``_row`` (id -> row), ``_mat`` ((len, dim), rows in the order of ``_ids``: float32 in
    RAM, or a read-only memmap of the stored dtype) and ``_texts`` (id -> text). Subclasses load it
    and keep it in step with their writes (:func:`upsert_mirror`)."""

    _ids: np.ndarray
    _row: dict[str, int]
    _mat: np.ndarray
    _texts: dict[str, str]

    def __len__(self) -> int:
        return len(self._ids)

    def __contains__(self, key: str) -> bool:
        return key in self._row

    @property
    def ids(self) -> np.ndarray:
        return self._ids

    @property
    def matrix(self) -> np.ndarray:
        """(len, dim) matrix, rows in the order of ``ids``."""
        return self._mat

    def row(self, key: str) -> int:
        return self._row[key]

    def text(self, key: str) -> str:
        return self._texts[key]

    def texts(self, keys: Iterable[str]) -> list[str]:
        return [self._texts[k] for k in keys]

    def existing(self, keys: Iterable[str]) -> set[str]:
        """The ``keys`` the store holds."""
        return {k for k in keys if k in self._row}

    def vectors_of(self, keys: Sequence[str]) -> np.ndarray:
        """(len(keys), dim) float32 vectors of ``keys``, in that order."""
        return np.asarray(self._mat[[self._row[k] for k in keys]], dtype=np.float32).reshape(len(keys), self.dim)

    def texts_found(self, keys: Iterable[str]) -> dict[str, str]:
        """id -> text of those ``keys`` that are stored (a view of an older version may name
        ids deleted since; these are left out)."""
        return {k: self.text(k) for k in keys if k in self}

    def blocks(self, size: int = 65536):
        """Every vector in row blocks: (first row, block), rows in the order of ``ids``."""
        mat = self.matrix
        for start in range(0, len(mat), size):
            yield start, mat[start:start + size]

    def prepare_search(self) -> bool:
        """Build the backend's search index over these vectors if it keeps one; True if it does
        (an in-memory store keeps none)."""
        return False

    def iter_texts(self) -> Iterable[tuple[str, str]]:
        """Every (id, text)."""
        return self._texts.items()


def stored_rows(keys: Sequence[str], texts: Sequence[str], vectors, dim: int, dtype) -> np.ndarray | None:
    """An upsert's vectors checked (as many as keys and texts, ``dim`` wide) and cast to the storage
    dtype; None for an empty upsert."""
    if not (len(keys) == len(texts) == len(vectors)):
        raise ValueError("keys, texts and vectors must have the same length")
    if len(keys) == 0:
        return None
    vectors = np.asarray(vectors)
    if vectors.ndim != 2 or vectors.shape[1] != dim:
        raise ValueError(f"vectors must have shape (n, {dim})")
    return np.ascontiguousarray(vectors, dtype=dtype)


def last_positions(keys: Sequence[str]) -> dict[str, int]:
    """Each key's last position in ``keys`` (a repeated key: the last one wins, as in SQL)."""
    return {k: i for i, k in enumerate(keys)}


def delete_from_mirror(store, keys: Sequence[str]) -> None:
    """Drop ``keys`` (all present) from a store's in-memory mirror (``_ids``, ``_row``, ``_mat``, ``_texts``)."""
    keep = np.ones(len(store._ids), bool)
    keep[[store._row[k] for k in keys]] = False
    for k in keys:
        del store._texts[k]
    store._ids, store._mat = store._ids[keep], np.ascontiguousarray(store._mat[keep])
    store._row = {k: i for i, k in enumerate(store._ids)}


def upsert_mirror(store, last: dict[str, int], texts: Sequence[str], stored: np.ndarray) -> None:
    """Bring a store's in-memory mirror (``_ids`` sorted, ``_row``, ``_mat`` float32, ``_texts``) up to
    date after an upsert: ``last`` maps each key to its row of ``texts``/``stored`` (the stored
    dtype's values, so the mirror equals what a reload would give)."""
    new_keys = []
    for k, i in last.items():
        store._texts[k] = texts[i]
        if k in store._row:
            store._mat[store._row[k]] = stored[i]
        else:
            new_keys.append(k)
    if new_keys:
        new_keys.sort()
        src = np.fromiter((last[k] for k in new_keys), np.int64, len(new_keys))
        new_ids = np.array(new_keys, dtype=object)
        pos = np.searchsorted(store._ids, new_ids) if len(store._ids) else np.zeros(len(new_keys), np.int64)
        # one allocation for the merged matrix (np.insert keeps the old rows' order and places
        # the sorted new rows before the old row at each position)
        store._mat = np.insert(store._mat, pos, stored[src].astype(np.float32), axis=0)
        store._ids = np.insert(store._ids, pos, new_ids)
        store._row = {k: i for i, k in enumerate(store._ids)}
