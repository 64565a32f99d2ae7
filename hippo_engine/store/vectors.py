"""Embedding stores: the SQLite implementation of the typed interface.

``SQLiteEmbeddingStore`` keeps its rows in a table of the :class:`~hippo_engine.store.db.IndexDB`
and an in-memory matrix whose rows are sorted by id, so the same content gives the same matrix
whatever order it was inserted in. Vectors are stored as float32 or float16 and can be
memory-mapped on load from a derived ``vectors/*.npy`` file.

The interface and what every backend's store shares (``EmbeddingStore``, ``MirroredStore`` and the
mirror's helpers) are defined in :mod:`hippo_engine.store.embedding_store` and importable from here.
"""
from __future__ import annotations

import contextlib
import logging
import os
import re
import sqlite3
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Protocol

import numpy as np

from hippo_engine.store.base import ALL_STORE_NAMES, StoreError
from hippo_engine.store.embedding_store import (
    VECTOR_DTYPES,
    EmbeddingStore,
    MirroredStore,
    delete_from_mirror,
    last_positions,
    stored_rows,
    upsert_mirror,
)

__all__ = ["VECTOR_DTYPES", "EmbeddingStore", "MirroredStore", "SQLiteEmbeddingStore", "SQLiteIndex",
           "delete_from_mirror", "last_positions", "stored_rows", "upsert_mirror"]

logger = logging.getLogger(__name__)


class SQLiteIndex(Protocol):
    """What a :class:`SQLiteEmbeddingStore` uses of the SQLite index database it lives in
    (:class:`~hippo_engine.store.db.IndexDB`, which hands these stores out)."""

    path: Path
    conn: sqlite3.Connection

    def get_meta(self, key: str) -> str | None: ...

    def set_meta(self, key: str, value: str) -> None: ...

    def after_commit(self, fn: Callable[[], None]) -> None: ...


class SQLiteEmbeddingStore(MirroredStore):
    """An ``EmbeddingStore`` in one table of an ``IndexDB``, mirrored in memory.

    Rows of :attr:`matrix` are sorted by id, so the same content gives the same matrix whatever
    order it was inserted in. There is exactly one copy of the vectors in memory: the matrix
    (no list of blobs, no second matrix); ids and texts are kept beside it.

    Storage dtype (``vector_dtype``): vectors are written to SQLite as ``float32`` (4 bytes
    per dimension, the default) or ``float16`` (2 bytes, half the disk; values rounded to
    float16, about 3 significant digits). A row's dtype is read from its blob length, so an
    index may mix both (written under different settings). In RAM the matrix is float32.

    Memory mapping (``mmap=True``): on load the matrix is a read-only ``numpy.memmap`` of
    ``<save_dir>/vectors/<namespace>.<generation>.<dtype>.npy`` instead of an array in RAM;
    its dtype is ``vector_dtype`` (so a float16 store maps 2 bytes per dimension and callers
    get a float16 matrix: ``matrix @ q`` upcasts per call). The file is *derived* data, like
    ``graph.npz``: SQLite stays the single source of truth. Each write (upsert/delete) bumps
    the store's generation in the same SQLite transaction as the rows; after the commit the
    file of the new generation is written to a temporary name, flushed, fsynced and renamed
    into place, then mapped, and older generations are deleted. A crash at any point leaves
    either a committed generation whose file is missing or stale (rebuilt from SQLite on the
    next load, streaming row by row) or an uncommitted generation whose file is ignored and
    removed. Between a write and its commit the matrix is a float32 array in RAM (the
    synonymy update needs it); it is mapped again after the commit.
    """

    #: class-level defaults (subclasses that bypass ``__init__`` get a plain float32 RAM store)
    vector_dtype: np.dtype = np.dtype(np.float32)
    mmap: bool = False
    mmap_dir: Path | None = None

    def __init__(self, db: SQLiteIndex, namespace: str, dim: int, *, vector_dtype: str = "float32",
                 mmap: bool = False, mmap_dir: Path | None = None):
        if namespace not in ALL_STORE_NAMES:
            raise ValueError(f"unknown store {namespace!r}")
        if vector_dtype not in VECTOR_DTYPES:
            raise ValueError(f"vector_dtype must be one of {VECTOR_DTYPES}, got {vector_dtype!r}")
        self.db, self.namespace, self.dim = db, namespace, dim
        self.table = f"store_{namespace}"
        self.vector_dtype = np.dtype(vector_dtype)
        self.mmap = bool(mmap)
        self.mmap_dir = Path(mmap_dir) if mmap_dir is not None else db.path.parent / "vectors"
        self.reload()

    # ------------------------------------------------------------------ loading
    def _decode(self, blob: bytes) -> np.ndarray:
        n = len(blob)
        if n == 4 * self.dim:
            return np.frombuffer(blob, dtype=np.float32)
        if n == 2 * self.dim:
            return np.frombuffer(blob, dtype=np.float16)
        have = n // 4 if n % 4 == 0 else n / 2
        raise StoreError(f"{self.namespace} store holds {have:g}-dim vectors but the encoder gives "
                         f"{self.dim}; use the embedding model the index was built with, or a new save_dir")

    def _gen(self) -> int:
        return int(self.db.get_meta(f"vectors_gen_{self.namespace}") or 0)

    def reload(self) -> None:
        """Re-read the table (after a rolled-back transaction, for instance)."""
        conn = self.db.conn
        count = conn.execute(f"SELECT COUNT(*) FROM {self.table}").fetchone()[0]
        ids: list[str] = []
        texts: dict[str, str] = {}
        self._mat = None  # type: ignore[assignment]  # drop the old matrix before building the new one
        if self.mmap and count:
            for key, content in conn.execute(f"SELECT id, content FROM {self.table} ORDER BY id"):
                ids.append(key)
                texts[key] = content
            mat = self._map(count)
        else:
            mat = np.empty((count, self.dim), dtype=np.float32)
            for i, (key, content, blob) in enumerate(
                    conn.execute(f"SELECT id, content, vec FROM {self.table} ORDER BY id")):
                mat[i] = self._decode(blob)
                ids.append(key)
                texts[key] = content
            if len(ids) != count:  # pragma: no cover - concurrent writer
                raise StoreError(f"{self.namespace} store changed while it was read")
        self._ids = np.array(ids, dtype=object)
        self._texts = texts
        self._mat = mat
        self._row = {k: i for i, k in enumerate(ids)}

    # ------------------------------------------------------------------ memory mapping
    def sidecar_path(self, gen: int | None = None) -> Path:
        gen = self._gen() if gen is None else gen
        return self._mapped_dir() / f"{self.namespace}.{gen}.{self.vector_dtype.name}.npy"

    def _sidecars(self) -> list[Path]:
        folder = self.mmap_dir
        if folder is None or not folder.is_dir():
            return []
        return [p for p in folder.iterdir() if p.name.startswith(f"{self.namespace}.")]

    def _mapped_dir(self) -> Path:
        """The folder of the memory-mapped vector files (set by ``__init__``)."""
        if self.mmap_dir is None:
            raise StoreError(f"the {self.namespace} store has no folder for memory-mapped vectors")
        return self.mmap_dir

    def _map(self, count: int) -> np.ndarray:
        """Map the sidecar of the committed generation, (re)building it from SQLite if needed."""
        path = self.sidecar_path()
        mat = None
        if path.is_file():
            try:
                mat = np.load(path, mmap_mode="r")
            except (OSError, ValueError) as e:
                logger.warning("ignoring unreadable %s: %s", path, e)
            if mat is not None and (mat.shape != (count, self.dim) or mat.dtype != self.vector_dtype):
                logger.warning("ignoring %s: shape %s %s, expected (%d, %d) %s", path, mat.shape,
                               mat.dtype, count, self.dim, self.vector_dtype)
                mat = None
        if mat is None:
            def rows():
                for (blob,) in self.db.conn.execute(f"SELECT vec FROM {self.table} ORDER BY id"):
                    yield self._decode(blob)
            self._write_sidecar(path, count, rows())
            mat = np.load(path, mmap_mode="r")
        self._remove_sidecars(keep=path)
        return mat

    def _write_sidecar(self, path: Path, count: int, rows) -> None:
        """Write ``count`` rows to ``path`` atomically (temporary file, fsync, rename)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + f".tmp{os.getpid()}")
        try:
            out = np.lib.format.open_memmap(tmp, mode="w+", dtype=self.vector_dtype,
                                            shape=(count, self.dim))
            if isinstance(rows, np.ndarray):
                for start in range(0, count, 65536):  # bounded temporaries when casting
                    out[start:start + 65536] = rows[start:start + 65536]
            else:
                i = -1
                for i, v in enumerate(rows):
                    out[i] = v
                if i + 1 != count:  # pragma: no cover - concurrent writer
                    raise StoreError(f"{self.namespace} store changed while it was read")
            out.flush()
            del out
            with open(tmp, "rb+") as f:
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise
        with contextlib.suppress(OSError):  # make the rename durable
            fd = os.open(path.parent, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    def _remove_sidecars(self, keep: Path | None) -> None:
        """Delete the other generations' files, but not a temp file a live process is writing
        (``<name>.tmp<pid>``: another process rebuilding its sidecar)."""
        for p in self._sidecars():
            if p != keep and not _written_by_live_process(p):
                with contextlib.suppress(OSError):
                    p.unlink()

    def _to_ram(self) -> None:
        """Before a write: make the matrix a writable float32 array in RAM."""
        if not (isinstance(self._mat, np.ndarray) and self._mat.dtype == np.float32
                and self._mat.flags.writeable and not isinstance(self._mat, np.memmap)):
            self._mat = np.array(self._mat, dtype=np.float32)

    def _after_write(self) -> None:
        """Inside the write's transaction: bump the generation; map the new file after commit."""
        self.db.set_meta(f"vectors_gen_{self.namespace}", str(self._gen() + 1))
        if self.mmap:
            self.db.after_commit(self._remap)

    def _remap(self) -> None:
        if not self.mmap:
            return
        if len(self._ids) == 0:
            self._remove_sidecars(keep=None)
            return
        path = self.sidecar_path()
        try:
            self._write_sidecar(path, len(self._ids), self._mat)
            mat = np.load(path, mmap_mode="r")
        except OSError as e:  # the RAM matrix stays valid; the next load rebuilds the file
            logger.warning("could not write %s: %s", path, e)
            return
        self._mat = mat
        self._remove_sidecars(keep=path)

    # ------------------------------------------------------------------ reading
    def nbytes(self) -> dict[str, int]:
        """Bytes of the vectors: ``ram`` (anonymous memory), ``mapped`` (file-backed)."""
        mapped = isinstance(self._mat, np.memmap) or (
            isinstance(self._mat, np.ndarray) and isinstance(self._mat.base, np.memmap))
        n = int(self._mat.nbytes)
        return {"ram": 0 if mapped else n, "mapped": n if mapped else 0}

    # ------------------------------------------------------------------ writing
    def upsert(self, keys: Sequence[str], texts: Sequence[str], vectors: np.ndarray) -> None:
        stored = stored_rows(keys, texts, vectors, self.dim, self.vector_dtype)
        if stored is None:
            return
        self.db.conn.executemany(f"INSERT OR REPLACE INTO {self.table} (id, content, vec) VALUES (?, ?, ?)",
                                 [(k, t, v.tobytes()) for k, t, v in zip(keys, texts, stored, strict=False)])
        # memory: the values a reload would give (rounded to the storage dtype, as float32)
        self._to_ram()
        upsert_mirror(self, last_positions(keys), texts, stored)
        self._after_write()

    def delete(self, keys: Iterable[str]) -> None:
        keys = [k for k in set(keys) if k in self._row]
        if not keys:
            return
        self.db.conn.executemany(f"DELETE FROM {self.table} WHERE id=?", [(k,) for k in keys])
        self._to_ram()
        delete_from_mirror(self, keys)
        self._after_write()


def _written_by_live_process(path: Path) -> bool:
    """True for a ``*.tmp<pid>`` file whose process is still running."""
    m = re.search(r"\.tmp(\d+)$", path.name)
    if m is None:
        return False
    try:
        os.kill(int(m.group(1)), 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True     # exists, owned by someone else (or an absurd pid: leave it alone)
    return True
