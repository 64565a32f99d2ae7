"""Embedding stores in PostgreSQL + pgvector: :class:`PostgresEmbeddingStore`.

One table per namespace in the index's schema: ``store_<namespace> (id text COLLATE "C" PRIMARY
KEY, content text, vec vector(dim) | halfvec(dim))``. The column type follows ``vector_dtype``
when the table is created: ``float32`` (the default, like the SQLite store) is ``vector`` (4
bytes per dimension), ``float16`` is ``halfvec`` (2 bytes). Both hold exactly the values the
SQLite store keeps for the same dtype, so the in-memory float32 matrix, and every score computed
from it, is bit for bit the SQLite backend's. Once created, a table keeps its type (a later
``vector_dtype`` is ignored, with a log line).

Like :class:`~hippo_engine.store.vectors.SQLiteEmbeddingStore`, the store mirrors its rows in
memory (ids sorted bytewise, texts, a float32 matrix), read with binary ``COPY`` in blocks inside
one snapshot; writes go to the database and the mirror at once (call :meth:`reload` after a
rolled-back transaction). :meth:`PostgresEmbeddingStore.nearest` asks the database instead
(an HNSW index or an exact blocked scan), for indexes whose vectors should not all be in memory.
"""
from __future__ import annotations

import logging
import struct
from collections.abc import Iterable, Iterator, Sequence

import numpy as np

from hippo_engine.store.base import ALL_STORE_NAMES, StoreError
from hippo_engine.store.embedding_store import (
    VECTOR_DTYPES,
    MirroredStore,
    delete_from_mirror,
    last_positions,
    stored_rows,
    upsert_mirror,
)
from hippo_engine.store.postgres.errors import guard_driver_errors

logger = logging.getLogger(__name__)

_KINDS = {"float32": "vector", "float16": "halfvec"}
_WIRE = {"vector": ">f4", "halfvec": ">f2"}
_COPY_SIGNATURE = b"PGCOPY\n\xff\r\n\x00"
BLOCK_BYTES = 4 << 20
HNSW_M, HNSW_EF_CONSTRUCTION, MIN_EF_SEARCH = 16, 64, 100


@guard_driver_errors()
class PostgresEmbeddingStore(MirroredStore):
    """Texts and L2-normalised vectors of one namespace, in table ``store_<namespace>`` of a
    :class:`~hippo_engine.store.postgres.db.PostgresIndexStore`.

    ``vector_dtype`` picks the column type of a new table (see the module documentation);
    ``mmap`` and ``mmap_dir`` (options of the SQLite store) are accepted and ignored: the matrix
    is always a float32 array in RAM.
    """

    def __init__(self, db, namespace: str, dim: int, *, vector_dtype: str = "float32", mmap: bool = False,
                 mmap_dir=None):
        if namespace not in ALL_STORE_NAMES:
            raise ValueError(f"unknown store {namespace!r}")
        if vector_dtype not in VECTOR_DTYPES:
            raise ValueError(f"vector_dtype must be one of {VECTOR_DTYPES}, got {vector_dtype!r}")
        self.db, self.namespace, self.dim = db, namespace, int(dim)
        self.name = f"store_{namespace}"
        self.table = f"{db.q}.{self.name}"
        self.kind = self._ensure_table(_KINDS[vector_dtype])
        if self.kind != _KINDS[vector_dtype]:
            logger.info("%s: the %s store holds %s vectors; vector_dtype=%s is ignored", db.location, namespace,
                        self.kind, vector_dtype)
        self.vector_dtype = np.dtype(np.float32 if self.kind == "vector" else np.float16)
        self.reload()

    # ------------------------------------------------------------------ table
    def _column_type(self) -> str | None:
        row = self.db.conn.execute(
            "SELECT format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = to_regclass(%s) "
            "AND attname = 'vec' AND NOT attisdropped", (self.table,)).fetchone()
        return None if row is None else row[0]

    def _ensure_table(self, kind: str) -> str:
        """Create the table if missing; returns its vector type, refusing another dimension."""
        have = self._column_type()
        if have is None:
            with self.db.ddl() as c:
                c.execute(f'CREATE TABLE IF NOT EXISTS {self.table} (id text COLLATE "C" PRIMARY KEY, '
                          f"content text NOT NULL, vec {kind}({self.dim}) NOT NULL)")
                c.execute(f"ALTER TABLE {self.table} ALTER COLUMN vec SET STORAGE PLAIN")  # never out of line
            have = self._column_type()
        base, _, rest = (have or "").partition("(")
        if base not in _WIRE or not rest.rstrip(")").isdigit():
            raise StoreError(f"{self.db.location}: table {self.name} has a vec column of type {have}, "
                             "not a pgvector vector or halfvec")
        if int(rest.rstrip(")")) != self.dim:
            raise StoreError(f"{self.namespace} store holds {rest.rstrip(')')}-dim vectors but the encoder gives "
                             f"{self.dim} ({self.db.location}); use the embedding model the index was built with, "
                             "or a new schema")
        return base

    # ------------------------------------------------------------------ loading
    def reload(self) -> None:
        """Re-read the table (after a rolled-back transaction, for instance), in one snapshot."""
        self._mat = None  # type: ignore[assignment]  # dropped before the new matrix is read
        with self.db.snapshot() as c:
            rows = c.execute(f"SELECT id, content FROM {self.table} ORDER BY id").fetchall()
            mat = np.empty((len(rows), self.dim), np.float32)
            filled = 0
            for block in self._vector_blocks(f"SELECT vec FROM {self.table} ORDER BY id"):
                mat[filled:filled + len(block)] = block
                filled += len(block)
        if filled != len(rows):  # pragma: no cover - impossible within one snapshot
            raise StoreError(f"{self.db.location}: {self.name} changed while it was read")
        self._ids = np.array([r[0] for r in rows], dtype=object)
        self._texts = dict(rows)
        self._mat = mat
        self._row = {k: i for i, k in enumerate(self._ids)}

    def _vector_blocks(self, query: str, params: Sequence = (), native: bool = False) -> Iterator[np.ndarray]:
        """The vectors of ``query`` (one vector column) as float32 blocks of about 4 MiB (``native``:
        in the stored dtype, float16 for ``halfvec``), read with binary COPY (fixed-width rows,
        parsed by numpy)."""
        wire = np.dtype(_WIRE[self.kind])
        width = 4 + self.dim * wire.itemsize
        rowlen = 2 + 4 + width
        prefix = np.frombuffer(struct.pack(">hihh", 1, width, self.dim, 0), np.uint8)
        pending, size, started = [], 0, False

        def parse(data: bytes, final: bool) -> tuple[np.ndarray, bytes]:
            n = len(data) // rowlen
            if final:
                if data[n * rowlen:] != b"\xff\xff":
                    raise StoreError(f"{self.db.location}: unexpected end of the vectors of {self.name}")
            raw = np.frombuffer(data, np.uint8, count=n * rowlen).reshape(n, rowlen)
            if n and not (raw[:, :10] == prefix).all():
                raise StoreError(f"{self.db.location}: {self.name} holds a vector that is not {self.kind}({self.dim})")
            vals = np.ascontiguousarray(raw[:, 10:]).view(wire).reshape(n, self.dim)
            return vals.astype(self.vector_dtype if native else np.float32), data[n * rowlen:]

        with self.db.conn.cursor() as cur, cur.copy(f"COPY ({query}) TO STDOUT (FORMAT BINARY)", params) as cp:
            for chunk in cp:
                pending.append(bytes(chunk))
                size += len(chunk)
                if size < BLOCK_BYTES:
                    continue
                data = b"".join(pending)
                if not started:
                    data, started = self._skip_header(data), True
                block, rest = parse(data, final=False)
                pending, size = [rest], len(rest)
                if len(block):
                    yield block
        data = b"".join(pending)
        if not started:
            data = self._skip_header(data)
        block, _ = parse(data, final=True)
        if len(block):
            yield block

    def _skip_header(self, data: bytes) -> bytes:
        if data[:11] != _COPY_SIGNATURE:
            raise StoreError(f"{self.db.location}: unreadable COPY stream from {self.name}")
        return data[19 + int.from_bytes(data[15:19], "big"):]

    # ------------------------------------------------------------------ reading
    def nbytes(self) -> dict[str, int]:
        """Bytes of the vectors: ``ram`` (the in-memory matrix), ``mapped`` (always 0)."""
        return {"ram": int(self._mat.nbytes), "mapped": 0}

    # ------------------------------------------------------------------ writing
    def _encode(self, vectors: np.ndarray) -> list[bytes]:
        """pgvector's binary form of each row: dimension, 0, big-endian values."""
        head = struct.pack(">hh", self.dim, 0)
        wire = np.ascontiguousarray(vectors, dtype=_WIRE[self.kind])
        return [head + r.tobytes() for r in wire]

    def upsert(self, keys: Sequence[str], texts: Sequence[str], vectors: np.ndarray) -> None:
        """Insert or replace rows (a repeated key: the last one wins), in the database and in memory."""
        stored = stored_rows(keys, texts, vectors, self.dim, self.vector_dtype)
        if stored is None:
            return
        last = last_positions(keys)
        order = list(last.values())
        tmp = f"hippo_upsert_{self.kind}"
        with self.db.transaction() as c:
            c.execute(f'CREATE TEMP TABLE IF NOT EXISTS {tmp} (id text COLLATE "C", content text, vec {self.kind}) '
                      "ON COMMIT DROP")
            c.execute(f"TRUNCATE {tmp}")
            with c.cursor() as cur, cur.copy(f"COPY {tmp} (id, content, vec) FROM STDIN (FORMAT BINARY)") as cp:
                cp.set_types(["text", "text", "bytea"])
                for i, blob in zip(order, self._encode(stored[order]), strict=True):
                    cp.write_row((keys[i], texts[i], blob))
            c.execute(f"INSERT INTO {self.table} (id, content, vec) SELECT id, content, vec FROM {tmp} "
                      "ON CONFLICT (id) DO UPDATE SET content = EXCLUDED.content, vec = EXCLUDED.vec")
            self._upserted(last, texts, stored)

    def _upserted(self, last: dict[str, int], texts: Sequence[str], stored: np.ndarray) -> None:
        """Bring what is held in memory up to date after an upsert (here: the whole mirror)."""
        upsert_mirror(self, last, texts, stored)

    def delete(self, keys: Iterable[str]) -> None:
        """Remove the rows of ``keys`` (unknown keys are ignored)."""
        keys = [k for k in dict.fromkeys(keys) if k in self]
        if not keys:
            return
        with self.db.transaction() as c:
            c.execute(f"DELETE FROM {self.table} WHERE id = ANY(%s)", (keys,))
            self._deleted(keys)

    def _deleted(self, keys: list[str]) -> None:
        """Bring what is held in memory up to date after a delete (here: the whole mirror)."""
        delete_from_mirror(self, keys)

    # ------------------------------------------------------------------ top-k in the database
    def ensure_hnsw(self) -> None:
        """Build the HNSW index (inner product; m=16, ef_construction=64) if it is missing."""
        with self.db.ddl() as c:
            c.execute(f"CREATE INDEX IF NOT EXISTS {self.name}_hnsw ON {self.table} USING hnsw "
                      f"(vec {self.kind}_ip_ops) WITH (m = {HNSW_M}, ef_construction = {HNSW_EF_CONSTRUCTION})")

    def prepare_search(self) -> bool:
        """With ``postgres_search="hnsw"``: build the HNSW index (once; later rows go into it). True
        if the index searches with one."""
        if self.db.search != "hnsw":
            return False
        self.ensure_hnsw()
        return True

    def has_hnsw(self) -> bool:
        """Whether the HNSW index exists."""
        return self.db.table_exists(f"{self.name}_hnsw")

    def nearest(self, query_vectors: np.ndarray, k: int, exact: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """The ``k`` rows with the highest inner product for each query, from the database (not
        the in-memory mirror): ``(ids, scores)``, both (queries, k') with k' = min(k, rows),
        best first, ties by id. Scores are computed in numpy in float32 from the stored values.
        ``exact=False``: candidates from the HNSW index (``ef_search = max(100, k)``; without
        the index, PostgreSQL scans), rescored exactly (see :func:`_dot`); a query that gets fewer than k' candidates
        is padded with id None and score -inf. ``exact=True``: a blocked scan of every vector."""
        q = np.atleast_2d(np.asarray(query_vectors, np.float32))
        if q.shape[1] != self.dim:
            raise ValueError(f"query vectors must have {self.dim} dimensions, got {q.shape[1]}")
        with self.db.snapshot() as c:
            # min(k, rows) by reading at most k rows: a full count(*) was half of a query's time at 1.35M rows
            kk = int(c.execute(f"SELECT count(*) FROM (SELECT 1 FROM {self.table} LIMIT %s) AS s",
                               (max(int(k), 0),)).fetchone()[0])
            if exact:
                return self._nearest_exact(q, kk)
            return self._nearest_hnsw(q, kk)

    def _nearest_exact(self, q: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        ids = np.array([r[0] for r in self.db.conn.execute(f"SELECT id FROM {self.table} ORDER BY id")], object)
        best_rows = np.zeros((len(q), 0), np.int64)
        best = np.zeros((len(q), 0), np.float32)
        start = 0
        for block in self._vector_blocks(f"SELECT vec FROM {self.table} ORDER BY id"):
            scores = np.concatenate([best, np.stack([_dot(block, qv) for qv in q])], axis=1)
            rows = np.concatenate([best_rows, np.broadcast_to(np.arange(start, start + len(block)),
                                                              (len(q), len(block)))], axis=1)
            start += len(block)
            if scores.shape[1] > k:
                keep = np.argpartition(-scores, k - 1, axis=1)[:, :k] if k else np.zeros((len(q), 0), np.int64)
                scores, rows = np.take_along_axis(scores, keep, 1), np.take_along_axis(rows, keep, 1)
            best, best_rows = scores, rows
        order = np.lexsort((best_rows, -best), axis=1) if best.size else np.zeros(best.shape, np.int64)
        best_rows = np.take_along_axis(best_rows, order, 1)
        return ids[best_rows] if k else np.zeros((len(q), 0), object), np.take_along_axis(best, order, 1)

    def _wrap(self, qv: np.ndarray):
        """A query vector as a parameter of this table's type."""
        from pgvector import HalfVector, Vector
        return Vector(qv) if self.kind == "vector" else HalfVector(qv)

    def _nearest_hnsw(self, q: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        ef = max(MIN_EF_SEARCH, k)
        out_ids = np.full((len(q), k), None, object)
        out_scores = np.full((len(q), k), -np.inf, np.float32)
        c = self.db.conn
        c.execute("SELECT set_config('hnsw.ef_search', %s, true)", (str(ef),))
        for i, qv in enumerate(q):
            rows = c.execute(f"SELECT id, vec FROM {self.table} ORDER BY vec <#> %s LIMIT %s",
                             (self._wrap(qv), ef), binary=True).fetchall()
            if not rows or not k:
                continue
            rows.sort(key=lambda r: r[0])
            cand = np.array([r[1].to_numpy() for r in rows], np.float32)
            scores = _dot(cand, qv)
            top = np.argsort(-scores, kind="stable")[:k]
            out_ids[i, :len(top)] = [rows[j][0] for j in top]
            out_scores[i, :len(top)] = scores[top]
        return out_ids, out_scores


def _dot(rows: np.ndarray, q: np.ndarray) -> np.ndarray:
    """float32 inner products of ``rows`` with ``q``. ``einsum`` sums each row the same way
    whatever the other rows (a BLAS product's rounding depends on the matrix's shape), so the
    exact scan and the HNSW rescoring give a row the same score."""
    return np.einsum("ij,j->i", rows, q)


__all__ = ["PostgresEmbeddingStore"]
