"""A read-only view of one embedding store of a PostgreSQL index that keeps (almost) nothing in
memory: what a query process of a large index holds instead of a mirror of every vector.

:class:`LazyPostgresStore` is built for one index version, inside a snapshot of it, and keeps

- ``ids``: for the passage store an object array of str (results name passages by id and the
  graph's passage nodes are matched against them), for the fact store a sorted numpy bytes
  array (``S``: one byte per character, about 40 bytes a fact instead of about 100 for a
  Python str), for the entity store nothing (entities are found through the graph's ids);
- ``matrix``: the passage store only, in the stored dtype (float16 for ``halfvec``, float32 for
  ``vector``; dense passage scores need every passage), read in blocks by binary COPY;
- texts: never; :meth:`text` / :meth:`texts` ask the database.

Top-k goes to the database: :meth:`extremes` gives a query's ``k`` best rows with exact float64
scores and the lowest score of the table (the minimum of min-max normalisation), by the HNSW
index (candidates for ``q`` and for ``-q``, rescored exactly; the lowest score is then the best
the index finds, see the module :mod:`hippo_engine.retrieve.facts.fact_search`) or by an exact scan.
Rows a writer adds after the view was made are not in ``ids``; callers drop what they cannot
place (the retriever is rebuilt for the new version on its next use).
"""
from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence

import numpy as np

from hippo_engine.store.base import StoreError
from hippo_engine.store.postgres.errors import guard_driver_errors
from hippo_engine.store.postgres.vectors import _WIRE, MIN_EF_SEARCH, PostgresEmbeddingStore


@functools.cache
def _raw_binary():
    """A psycopg loader giving a column's binary value as bytes (vectors decoded in bulk:
    :meth:`LazyPostgresStore._decode`); psycopg is imported only here, when a store is used."""
    from psycopg.adapt import Loader
    from psycopg.pq import Format

    class RawBinary(Loader):
        format = Format.BINARY

        def load(self, data) -> bytes:
            return bytes(data)

    return RawBinary


#: pgvector's largest ``hnsw.ef_search``
MAX_EF_SEARCH = 1000


@guard_driver_errors()
class LazyPostgresStore(PostgresEmbeddingStore):
    """Read-only, memory-light view of table ``store_<namespace>`` (see the module documentation).
    ``keep``: ``"ids+matrix"`` (passages), ``"ids"`` (facts: ids as bytes) or ``"count"``."""

    holds_vectors = False     # the vectors stay in the database

    def __init__(self, db, namespace: str, dim: int, *, keep: str = "count", vector_dtype: str = "float32"):
        if keep not in ("ids+matrix", "ids", "count"):
            raise ValueError(f"keep must be 'ids+matrix', 'ids' or 'count', got {keep!r}")
        self.keep = keep
        super().__init__(db, namespace, dim, vector_dtype=vector_dtype)

    def _ensure_table(self, kind: str) -> str:
        have = self._column_type()
        if have is None:    # an empty index: nothing to read (a reader creates no table)
            return kind
        return super()._ensure_table(kind)

    def reload(self) -> None:
        """Read what the view keeps, in one snapshot."""
        self._mat = None  # type: ignore[assignment]  # dropped before the new one is read
        self._ids = np.zeros(0, object if self.keep == "ids+matrix" else "S1")
        self._mat = np.zeros((0, self.dim), self.vector_dtype)
        with self.db.snapshot() as c:
            if self._column_type() is None:
                self._n = 0
                return
            self._n = int(c.execute(f"SELECT count(*) FROM {self.table}").fetchone()[0])
            if self.keep == "count":
                return
            ids = self._read_ids()
            if self.keep == "ids+matrix":
                self._ids = np.array([i.decode("utf-8") for i in ids.tolist()], dtype=object)
                mat = np.empty((len(ids), self.dim), self.vector_dtype)
                filled = 0
                for block in self._vector_blocks(f"SELECT vec FROM {self.table} ORDER BY id", native=True):
                    mat[filled:filled + len(block)] = block
                    filled += len(block)
                if filled != len(ids):  # pragma: no cover - impossible within one snapshot
                    raise StoreError(f"{self.db.location}: {self.name} changed while it was read")
                self._mat = mat
            else:
                self._ids = ids
        if len(self._ids) != self._n:  # pragma: no cover - impossible within one snapshot
            raise StoreError(f"{self.db.location}: {self.name} changed while it was read")

    #: ids fetched per round trip when reading every id
    ID_BLOCK = 100_000

    def _read_ids(self) -> np.ndarray:
        """Every id, sorted (bytewise: ``COLLATE "C"``), as a numpy bytes array of their UTF-8
        encoding, fetched by a server-side cursor in blocks (a block of str at a time)."""
        parts = []
        with self.db.conn.cursor(name=f"hippo_ids_{self.namespace}") as cur:
            cur.itersize = self.ID_BLOCK
            cur.execute(f"SELECT id FROM {self.table} ORDER BY id")
            while rows := cur.fetchmany(self.ID_BLOCK):
                parts.append(np.array([r[0].encode("utf-8") for r in rows], dtype="S"))
        if not parts:
            return np.zeros(0, "S1")
        width = max(p.dtype.itemsize for p in parts)
        return np.concatenate([p.astype(f"S{width}") for p in parts])

    # ------------------------------------------------------------------ reading
    def __len__(self) -> int:
        return self._n

    def __contains__(self, key: str) -> bool:
        return bool(self.db.conn.execute(f"SELECT 1 FROM {self.table} WHERE id = %s", (key,)).fetchone()) \
            if self._n else False

    def row(self, key: str) -> int:
        if self.keep == "count":
            raise StoreError(f"{self.name}: this view keeps no ids")
        want = key.encode("utf-8") if self._ids.dtype.kind == "S" else key
        pos = int(np.searchsorted(self._ids, want))
        if pos >= len(self._ids) or self._ids[pos] != want:
            raise KeyError(key)
        return pos

    def rows_of(self, keys: Sequence[str]) -> np.ndarray:
        """Rows of ``keys`` in ``ids`` (-1: not in this view)."""
        if not len(keys) or not len(self._ids):
            return np.full(len(keys), -1, np.int64)
        want = np.array([k.encode("utf-8") for k in keys], dtype="S") if self._ids.dtype.kind == "S" else \
            np.array(list(keys), dtype=object)
        pos = np.searchsorted(self._ids, want)
        ok = pos < len(self._ids)
        ok[ok] = self._ids[pos[ok]] == want[ok]
        return np.where(ok, pos, -1).astype(np.int64)

    def key(self, row: int) -> str:
        """The id of row ``row`` (a str whatever ``ids`` holds)."""
        k = self._ids[row]
        return k.decode("utf-8") if isinstance(k, bytes) else k

    def text(self, key: str) -> str:
        got = self.texts([key])
        return got[0]

    def texts(self, keys: Iterable[str]) -> list[str]:
        """The texts of ``keys``, read from the table now (KeyError for one that is not there)."""
        keys = list(keys)
        found = self.texts_found(keys)
        missing = [k for k in keys if k not in found]
        if missing:
            raise KeyError(missing[0])
        return [found[k] for k in keys]

    def texts_found(self, keys: Iterable[str]) -> dict[str, str]:
        """``{id: text}`` of the ``keys`` the table holds now (a row another process deleted after
        this view was made is left out)."""
        keys = list(dict.fromkeys(keys))
        if not keys:
            return {}
        return dict(self.db.conn.execute(f"SELECT id, content FROM {self.table} WHERE id = ANY(%s)",
                                         (keys,)).fetchall())

    def vectors_found(self, keys: Sequence[str]) -> tuple[list[str], np.ndarray]:
        """The ``keys`` the table holds now, in the given order, and their vectors ((n, dim) float32),
        read from the table (a metadata filter's facts and entities, searched in memory)."""
        keys = list(dict.fromkeys(keys))
        got: dict[str, np.ndarray] = {}
        for start in range(0, len(keys), self.ID_BLOCK):
            part = keys[start:start + self.ID_BLOCK]
            for key, vec in self.db.conn.execute(f"SELECT id, vec FROM {self.table} WHERE id = ANY(%s)", (part,),
                                                 binary=True).fetchall():
                got[key] = vec.to_numpy()
        found = [k for k in keys if k in got]
        mat = np.empty((len(found), self.dim), np.float32)
        for i, k in enumerate(found):
            mat[i] = got[k]
        return found, mat

    def nbytes(self) -> dict[str, int]:
        """Bytes held: ``ram`` (ids and matrix), ``mapped`` (always 0)."""
        return {"ram": int(self._mat.nbytes + self._ids.nbytes), "mapped": 0}

    # ------------------------------------------------------------------ no writes
    def upsert(self, keys, texts, vectors) -> None:
        raise StoreError(f"{self.name}: a lazy view is read-only (writes go through the index)")

    def delete(self, keys) -> None:
        raise StoreError(f"{self.name}: a lazy view is read-only (writes go through the index)")

    # ------------------------------------------------------------------ top-k with exact scores
    def extremes(self, q: np.ndarray, k: int, exact: bool, lowest: bool = True, floor_ef: int | None = None
                 ) -> tuple[list[list[str]], np.ndarray, np.ndarray]:
        """For each query row of ``q``: the ``k`` best ids (ties by id), their exact float64 scores
        (``(b, k')``, k' = min(k, rows); a query with fewer candidates is padded with -inf and
        its id list is shorter) and the lowest score of the table (``(b,)``; with
        ``lowest=False`` only the lowest of the candidates). ``exact``: one blocked scan of every
        vector; else HNSW candidates for ``q``, ``ef_search = min(1000, max(100, k))`` with
        pgvector's iterative scan on, so rows deleted but not yet vacuumed do not shorten the list,
        rescored exactly; and, when ``lowest``, the lowest exact score among the ``floor_ef``
        candidates for ``-q`` found with ``ef_search = floor_ef`` (None: the top search's; only
        the single lowest row matters there, so a small one costs fewer index pages for about the
        same minimum: ``postgres_floor_ef_search``)."""
        q = np.atleast_2d(np.asarray(q, np.float32))
        kk = min(int(k), self._n)
        b = len(q)
        if not self._n or not b:
            return [[] for _ in range(b)], np.full((b, kk), -np.inf), np.full(b, np.inf)
        q64 = q.astype(np.float64)
        with self.db.snapshot() as c:
            if exact:
                return self._scan(q64, kk)
            ef = min(MAX_EF_SEARCH, max(MIN_EF_SEARCH, kk))
            ids, scores, lows = self._hnsw_top(c, q, q64, kk, ef)
            if lowest:
                floor = ef if floor_ef is None else min(MAX_EF_SEARCH, max(1, int(floor_ef)))
                lows = np.minimum(lows, self._hnsw_floor(c, q, q64, floor))
        return ids, scores, lows

    @staticmethod
    def _search_settings(c, ef: int) -> None:
        """This transaction's HNSW searches: ``ef_search`` and pgvector's iterative scan."""
        c.execute("SELECT set_config('hnsw.ef_search', %s, true), "
                  "set_config('hnsw.iterative_scan', 'relaxed_order', true)", (str(ef),))

    def _hnsw_top(self, c, q: np.ndarray, q64: np.ndarray, kk: int, ef: int
                  ) -> tuple[list[list[str]], np.ndarray, np.ndarray]:
        """:meth:`extremes`' top ``kk`` ids and exact scores of each query by the HNSW index, and the
        lowest score among each query's candidates."""
        ids: list[list[str]] = [[] for _ in range(len(q))]
        scores = np.full((len(q), kk), -np.inf)
        lows = np.full(len(q), np.inf)
        self._search_settings(c, ef)
        for j, qv in enumerate(q):
            best = self._candidates(qv, max(ef, kk))
            if best[0]:
                s = np.einsum("ij,j->i", best[1], q64[j])
                order = np.lexsort((np.array(best[0], dtype=object), -s))[:kk]
                ids[j] = [best[0][i] for i in order]
                scores[j, :len(order)] = s[order]
                lows[j] = s.min()
        return ids, scores, lows

    def _hnsw_floor(self, c, q: np.ndarray, q64: np.ndarray, ef: int) -> np.ndarray:
        """Each query's lowest exact score among the HNSW index's ``ef`` best rows for ``-q`` (inf:
        none found)."""
        lows = np.full(len(q), np.inf)
        self._search_settings(c, ef)
        for j, qv in enumerate(q):
            low_ids, low_vecs = self._candidates(-qv, ef)
            if low_ids:
                lows[j] = float(np.einsum("ij,j->i", low_vecs, q64[j]).min())
        return lows

    def nearest_ids(self, q: np.ndarray, k: int) -> list[str]:
        """The ids of the HNSW index's ``k`` nearest rows to the vector ``q`` by inner product, in the
        index's order (``ef_search`` and the iterative scan as :meth:`extremes`); no vector is read
        (a caller that scores the rows itself, from a matrix in memory)."""
        kk = min(int(k), self._n)
        if kk <= 0:
            return []
        qv = np.asarray(q, np.float32).ravel()
        with self.db.snapshot() as c:
            self._search_settings(c, min(MAX_EF_SEARCH, max(MIN_EF_SEARCH, kk)))
            rows = c.execute(f"SELECT id FROM {self.table} ORDER BY vec <#> %s LIMIT %s", (self._wrap(qv), kk),
                             binary=True).fetchall()
        return [r[0] for r in rows]

    def _candidates(self, qv: np.ndarray, n: int) -> tuple[list[str], np.ndarray]:
        """Up to ``n`` ids by the index's order for ``qv`` with their stored vectors (float64). The
        vectors arrive as raw binary values, decoded together by numpy (pgvector's loader makes an
        object per row: about 4 ms for 100 rows)."""
        with self.db.conn.cursor(binary=True) as cur:
            info = cur.adapters.types.get(self.kind)
            if info is not None:
                cur.adapters.register_loader(info.oid, _raw_binary())
            rows = cur.execute(f"SELECT id, vec FROM {self.table} ORDER BY vec <#> %s LIMIT %s",
                               (self._wrap(qv), n)).fetchall()
        if not rows:
            return [], np.zeros((0, self.dim))
        if info is None:  # pragma: no cover - pgvector registers its types on every connection
            return [r[0] for r in rows], np.array([r[1].to_numpy() for r in rows], np.float64)
        return [r[0] for r in rows], self._decode([r[1] for r in rows])

    def _decode(self, values: list[bytes]) -> np.ndarray:
        """pgvector binary values of this table's type (int16 dim, int16 unused, big-endian floats)
        as an (n, dim) float64 array."""
        wire = np.dtype(_WIRE[self.kind])
        width = 4 + self.dim * wire.itemsize
        raw = np.frombuffer(b"".join(values), np.uint8)
        if len(raw) != len(values) * width:
            raise StoreError(f"{self.db.location}: {self.name} holds a vector that is not {self.kind}({self.dim})")
        raw = raw.reshape(len(values), width)
        return np.ascontiguousarray(raw[:, 4:]).view(wire).astype(np.float64)

    def _scan(self, q64: np.ndarray, k: int) -> tuple[list[list[str]], np.ndarray, np.ndarray]:
        """Exact: every vector scored in float64, block by block; per query the rows at or above
        its k-th best score are kept (ties at the cut included, then ordered by id)."""
        b = len(q64)
        keep_s = [np.zeros(0) for _ in range(b)]
        keep_r = [np.zeros(0, np.int64) for _ in range(b)]
        lows = np.full(b, np.inf)
        start = 0
        for block in self._vector_blocks(f"SELECT vec FROM {self.table} ORDER BY id", native=True):
            sc = np.einsum("ij,bj->bi", block.astype(np.float64), q64)
            lows = np.minimum(lows, sc.min(axis=1))
            rows = np.arange(start, start + len(block))
            start += len(block)
            for j in range(b):
                s, r = np.concatenate([keep_s[j], sc[j]]), np.concatenate([keep_r[j], rows])
                if len(s) > k:
                    kth = np.partition(s, len(s) - k)[len(s) - k] if k else np.inf
                    sel = s >= kth
                    s, r = s[sel], r[sel]
                keep_s[j], keep_r[j] = s, r
        names = self._read_ids()        # in this snapshot, so rows and ids agree
        ids_out: list[list[str]] = []
        scores = np.full((b, k), -np.inf)
        for j in range(b):
            order = np.lexsort((keep_r[j], -keep_s[j]))[:k]
            ids_out.append([names[i].decode("utf-8") for i in keep_r[j][order]])
            scores[j, :len(order)] = keep_s[j][order]
        return ids_out, scores, lows


__all__ = ["LazyPostgresStore"]
