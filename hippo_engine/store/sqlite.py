"""Persistent storage: embedding stores and the passage->triples table, in one SQLite file.

Everything the index holds lives in ``<save_dir>/index.sqlite``. One ``index()`` or
``delete()`` call is one SQLite transaction, so a crash mid-write leaves the previous state
readable; upserts and deletes touch only the rows they change (no full rewrite).

``EmbeddingStore`` is the typed interface; ``SQLiteEmbeddingStore`` implements it and keeps an
in-memory matrix whose rows are sorted by id, so the same content gives the same matrix
whatever order it was inserted in. Vectors are stored as float32 or float16, and can be
memory-mapped on load from a derived ``vectors/*.npy`` file (see ``SQLiteEmbeddingStore``).
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
import sqlite3
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path

import numpy as np

from hippo_engine.text import Hyperedge

logger = logging.getLogger(__name__)

SCHEMA_VERSION = "1"
STORE_NAMES = ("passage", "entity", "fact")
VECTOR_DTYPES = ("float32", "float16")


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
        self._after_commit: list[Callable[[], None]] = []

    def _create(self) -> None:
        c = self.conn
        c.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        for ns in STORE_NAMES:
            c.execute(f"CREATE TABLE IF NOT EXISTS store_{ns} (id TEXT PRIMARY KEY, content TEXT NOT NULL,"
                      " vec BLOB NOT NULL)")
        c.execute("CREATE TABLE IF NOT EXISTS passage_triples (passage_id TEXT NOT NULL, pos INTEGER NOT NULL,"
                  " subj TEXT NOT NULL, pred TEXT NOT NULL, obj TEXT NOT NULL, PRIMARY KEY (passage_id, pos))")
        c.execute("CREATE TABLE IF NOT EXISTS passage_hyperedges (passage_id TEXT NOT NULL, pos INTEGER NOT NULL,"
                  " text TEXT NOT NULL, entities TEXT NOT NULL, PRIMARY KEY (passage_id, pos))")
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
                self._after_commit.clear()
                self.conn.execute("ROLLBACK")
            raise
        else:
            self._depth -= 1
            if self._depth == 0:
                self.conn.execute("COMMIT")
                self._run_after_commit()

    def after_commit(self, fn: Callable[[], None]) -> None:
        """Call ``fn`` once the current transaction has committed (now, outside one).
        Dropped if the transaction rolls back."""
        if self._depth == 0:
            fn()
        elif fn not in self._after_commit:
            self._after_commit.append(fn)

    def _run_after_commit(self) -> None:
        todo, self._after_commit = self._after_commit, []
        for fn in todo:
            try:
                fn()
            except Exception as e:  # noqa: BLE001 - derived data only; the commit stands
                logger.warning("after-commit step %r failed: %s", fn, e)

    def get_meta(self, key: str) -> str | None:
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

    # --- passage -> hyperedges (sentences / n-ary facts and their entities) -----------------
    def load_passage_hyperedges(self) -> dict[str, list[Hyperedge]]:
        out: dict[str, list[Hyperedge]] = {}
        for pid, text, ents in self.conn.execute(
                "SELECT passage_id, text, entities FROM passage_hyperedges ORDER BY passage_id, pos"):
            try:
                entities = tuple(json.loads(ents))
            except ValueError as e:
                raise StoreError(f"{self.path}: unreadable entity list of a fact of passage {pid}: {e}") from e
            out.setdefault(pid, []).append(Hyperedge(text, entities))
        return out

    def put_passage_hyperedges(self, pid: str, hyperedges: Sequence[Hyperedge]) -> None:
        self.conn.execute("DELETE FROM passage_hyperedges WHERE passage_id=?", (pid,))
        self.conn.executemany("INSERT INTO passage_hyperedges VALUES (?, ?, ?, ?)",
                              [(pid, i, h.text, json.dumps(list(h.entities), ensure_ascii=False))
                               for i, h in enumerate(hyperedges)])

    def delete_passage_hyperedges(self, pids: Iterable[str]) -> None:
        self.conn.executemany("DELETE FROM passage_hyperedges WHERE passage_id=?", [(p,) for p in pids])

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

    def __init__(self, db: IndexDB, namespace: str, dim: int, *, vector_dtype: str = "float32",
                 mmap: bool = False, mmap_dir: Path | None = None):
        if namespace not in STORE_NAMES:
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
        self._mat = None  # drop the old matrix before building the new one
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
        return self.mmap_dir / f"{self.namespace}.{gen}.{self.vector_dtype.name}.npy"

    def _sidecars(self) -> list[Path]:
        if not self.mmap_dir.is_dir():
            return []
        return [p for p in self.mmap_dir.iterdir() if p.name.startswith(f"{self.namespace}.")]

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
        for p in self._sidecars():
            if p != keep:
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
    def __len__(self) -> int:
        return len(self._ids)

    def __contains__(self, key: str) -> bool:
        return key in self._row

    @property
    def ids(self) -> np.ndarray:
        return self._ids

    @property
    def matrix(self) -> np.ndarray:
        """(len, dim) matrix, rows in the order of ``ids``: float32 in RAM, or a read-only
        memmap of dtype ``vector_dtype`` when the store is memory-mapped."""
        return self._mat

    def row(self, key: str) -> int:
        return self._row[key]

    def text(self, key: str) -> str:
        return self._texts[key]

    def texts(self, keys: Iterable[str]) -> list[str]:
        return [self._texts[k] for k in keys]

    def nbytes(self) -> dict[str, int]:
        """Bytes of the vectors: ``ram`` (anonymous memory), ``mapped`` (file-backed)."""
        mapped = isinstance(self._mat, np.memmap) or (
            isinstance(self._mat, np.ndarray) and isinstance(self._mat.base, np.memmap))
        n = int(self._mat.nbytes)
        return {"ram": 0 if mapped else n, "mapped": n if mapped else 0}

    # ------------------------------------------------------------------ writing
    def upsert(self, keys: Sequence[str], texts: Sequence[str], vectors: np.ndarray) -> None:
        if not (len(keys) == len(texts) == len(vectors)):
            raise ValueError("keys, texts and vectors must have the same length")
        if len(keys) == 0:
            return
        vectors = np.asarray(vectors)
        if vectors.ndim != 2 or vectors.shape[1] != self.dim:
            raise ValueError(f"vectors must have shape (n, {self.dim})")
        stored = np.ascontiguousarray(vectors, dtype=self.vector_dtype)
        self.db.conn.executemany(f"INSERT OR REPLACE INTO {self.table} (id, content, vec) VALUES (?, ?, ?)",
                                 [(k, t, v.tobytes()) for k, t, v in zip(keys, texts, stored, strict=False)])
        # memory: the values a reload would give (rounded to the storage dtype, as float32)
        self._to_ram()
        last: dict[str, int] = {}
        for i, k in enumerate(keys):  # a repeated key: the last one wins, as in SQLite
            last[k] = i
        new_keys = []
        for k, i in last.items():
            self._texts[k] = texts[i]
            if k in self._row:
                self._mat[self._row[k]] = stored[i]
            else:
                new_keys.append(k)
        if new_keys:
            new_keys.sort()
            src = np.fromiter((last[k] for k in new_keys), np.int64, len(new_keys))
            new_ids = np.array(new_keys, dtype=object)
            pos = np.searchsorted(self._ids, new_ids) if len(self._ids) else np.zeros(len(new_keys), np.int64)
            # one allocation for the merged matrix (np.insert keeps the old rows' order and
            # places the sorted new rows before the old row at each position)
            self._mat = np.insert(self._mat, pos, stored[src].astype(np.float32), axis=0)
            self._ids = np.insert(self._ids, pos, new_ids)
            self._row = {k: i for i, k in enumerate(self._ids)}
        self._after_write()

    def delete(self, keys: Iterable[str]) -> None:
        keys = [k for k in set(keys) if k in self._row]
        if not keys:
            return
        self.db.conn.executemany(f"DELETE FROM {self.table} WHERE id=?", [(k,) for k in keys])
        self._to_ram()
        keep = np.ones(len(self._ids), bool)
        keep[[self._row[k] for k in keys]] = False
        for k in keys:
            del self._texts[k]
        self._ids, self._mat = self._ids[keep], np.ascontiguousarray(self._mat[keep])
        self._row = {k: i for i, k in enumerate(self._ids)}
        self._after_write()
