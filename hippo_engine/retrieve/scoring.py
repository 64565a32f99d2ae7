"""Scoring, as pure functions: min-max normalisation, top-k, exact dot products and the scans of
a stored matrix against query vectors (dense passage scores, fact candidates).

Determinism: a query's scores are bit-identical whether it is scored alone or in any batch.
Fact scores: a float32 matrix product (BLAS for a batch) only nominates candidates, with a margin
above its worst-case rounding error, and the candidates' scores, the minimum and the maximum are
recomputed exactly in float64 from the stored vectors (:func:`top_fact_rows`). Dense passage
scores are computed one query at a time with NumPy's own dot loop (:func:`dense_column`; BLAS
rounds differently depending on the batch shape).
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from hippo_engine.system import parallel_map, usable_cpus

#: row or column numbers: a list or an integer array
Rows = Sequence[int] | np.ndarray

#: Rows of a stored matrix scored per BLAS call (a float16 or memory-mapped store is converted
#: to float32 one block at a time, so no full-size copy is made).
ROW_BLOCK = 32768
_EPS32 = 2.0 ** -24
#: scans of a stored matrix run on at most this many threads; matrices with fewer rows than
#: ``_SPLIT_MIN_ROWS`` are scanned in the calling thread (the hand-off costs more than it saves)
_SCAN_THREADS = min(4, usable_cpus())
_SPLIT_MIN_ROWS = 8192


def min_max(x: np.ndarray, axis: int = 0) -> np.ndarray:
    """Min-max normalise along ``axis``; a constant slice becomes all ones (as the reference)."""
    x = np.asarray(x, dtype=np.float64)
    lo = x.min(axis=axis, keepdims=True)
    rng = x.max(axis=axis, keepdims=True) - lo
    safe = np.where(rng > 0, rng, 1.0)
    return np.where(rng > 0, (x - lo) / safe, 1.0)


def top_k(scores: np.ndarray, k: int) -> np.ndarray:
    """Indices of the ``k`` largest scores, best first; ties go to the lower index."""
    scores = np.asarray(scores)
    k = min(k, len(scores))
    if k <= 0:
        return np.zeros(0, dtype=np.int64)
    if k < len(scores):
        part = np.argpartition(-scores, k - 1)[:k]
        thresh = scores[part].min()
        cand = np.flatnonzero(scores >= thresh)  # include every tie at the cut
    else:
        cand = np.arange(len(scores))
    order = np.lexsort((cand, -scores[cand]))
    return cand[order][:k]


def exact_dot(mat: np.ndarray, rows: np.ndarray, q: np.ndarray) -> np.ndarray:
    """``mat[rows] . q`` in float64 (products of float32/float16 values are exact in float64;
    the sum runs in a fixed order), identical for identical inputs."""
    if len(rows) == 0:
        return np.zeros(0)
    a = np.asarray(mat[np.asarray(rows)], dtype=np.float64)
    return np.einsum("ij,j->i", a, np.asarray(q, dtype=np.float64))


def row_blocks(n: int, size: int | None = None):
    """``(start, end)`` spans of ``size`` rows (default ``ROW_BLOCK``) covering ``n`` rows."""
    size = size or ROW_BLOCK
    for s in range(0, n, size):
        yield s, min(n, s + size)


def row_scores(mat: np.ndarray, s: int, e: int, q32: np.ndarray) -> np.ndarray:
    """(b, e - s) float32 scores of rows s:e against the query rows ``q32``. One query: NumPy's
    own dot-product loop (each score computed the same way whatever the block or thread);
    several: one BLAS product."""
    blk = np.asarray(mat[s:e], dtype=np.float32)
    if q32.shape[0] == 1:
        return np.einsum("ij,j->i", blk, q32[0])[None, :]
    return q32 @ blk.T


def blas_column(mat: np.ndarray, q: np.ndarray) -> np.ndarray:
    """``mat @ q`` (float32) for one query by BLAS, a block of rows at a time (a float16 or
    memory-mapped matrix is converted block by block). The rounding may depend on the BLAS
    kernel, so use it only where a margin covers the float32 error (:func:`top_fact_rows`)."""
    out = np.empty(len(mat), np.float32)
    for s, e in row_blocks(len(mat)):
        out[s:e] = np.asarray(mat[s:e], dtype=np.float32) @ q
    return out


def dense_column(mat: np.ndarray, q: np.ndarray) -> np.ndarray:
    """``mat @ q`` (float32) for one query, computed row by row with NumPy's dot loop (blocks
    of rows on a few threads of the shared pool), so a query's scores never depend on what else
    is scored."""
    q32 = np.asarray(q, dtype=np.float32).reshape(1, -1)
    out = np.empty(len(mat), np.float32)

    def work(se):
        out[se[0]:se[1]] = row_scores(mat, se[0], se[1], q32)[0]

    n = len(mat)
    # equal blocks, one per scan thread at least once the matrix is worth splitting (an
    # unbalanced split, e.g. 16384 + 649 rows, leaves one thread doing all the work)
    parts = max(-(-n // 16384), _SCAN_THREADS if n >= _SPLIT_MIN_ROWS else 1)
    size = -(-n // parts) if n else 1
    blocks = list(row_blocks(n, size))
    if len(blocks) > 1:
        parallel_map(work, blocks, _SCAN_THREADS)
    elif blocks:
        work(blocks[0])
    return out


def dense_scores(mat: np.ndarray, q_pass: np.ndarray) -> np.ndarray:
    """(n_rows, n_queries) raw cosine scores (float32), one query at a time (one pass over
    ``mat`` per query), so they are bit-identical whatever the batch."""
    q32 = np.atleast_2d(np.asarray(q_pass, dtype=np.float32))
    out = np.empty((len(mat), q32.shape[0]), np.float32)
    for j in range(q32.shape[0]):
        out[:, j] = dense_column(mat, q32[j])
    return out


def max_row_norm(mat: np.ndarray) -> float:
    """The largest L2 norm of a row of ``mat`` (0.0 for no rows)."""
    m = 0.0
    for s, e in row_blocks(len(mat)):
        blk = np.asarray(mat[s:e], dtype=np.float32)
        m = max(m, float(np.einsum("ij,ij->i", blk, blk).max(initial=0.0)))
    return float(np.sqrt(m))


def top_fact_rows(fact_mat: np.ndarray, row_norm: float, q_fact: np.ndarray, k: int
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Each query's ``k`` best rows of ``fact_mat`` and their min-max normalised scores.

    ``row_norm``: :func:`max_row_norm` of ``fact_mat``. Returns (rows, scores), each
    (n_queries, k') with k' = min(k, n_rows), best first, ties to the lower row; scores are
    exact: (s - min) / (max - min) over all rows with s the float64 dot product (1.0 for every
    row when all scores are equal). One float32 product per block of rows nominates candidates
    within a margin of its rounding error; only those are rescored exactly.
    """
    q = np.atleast_2d(np.asarray(q_fact, dtype=np.float32))
    b, n = q.shape[0], len(fact_mat)
    kk = min(k, n)
    if kk <= 0 or b == 0:
        return np.zeros((b, 0), np.int64), np.zeros((b, 0))
    # |float32 dot - exact| <= dim * 2^-24 * |row| * |q|; twice that as the margin
    qnorm = np.sqrt(np.einsum("ij,ij->i", q.astype(np.float64), q.astype(np.float64)))
    delta = 2.0 * (2.0 * q.shape[1] * _EPS32 * row_norm * qnorm + 1e-30)
    hi_c: list[list[np.ndarray]] = [[] for _ in range(b)]
    lo_c: list[list[np.ndarray]] = [[] for _ in range(b)]
    qidx = np.arange(b + 1)
    # one query: one BLAS pass over all rows; several: one BLAS product per block of rows
    # (either way the margin delta covers the float32 rounding, whatever the kernel)
    spans = [(0, n)] if b == 1 else list(row_blocks(n))
    for s, e in spans:
        sc = blas_column(fact_mat, q[0])[None, :] if b == 1 else row_scores(fact_mat, s, e, q)
        m = e - s
        kb = min(kk, m)
        kth = np.partition(sc, m - kb, axis=1)[:, m - kb]   # per query, k-th best in the block
        for lst, mask in ((hi_c, sc >= (kth - delta).astype(np.float32)[:, None]),
                          (lo_c, sc <= (sc.min(axis=1) + delta).astype(np.float32)[:, None])):
            r, c = np.divmod(np.flatnonzero(mask), m)   # 1-D search: much faster than 2-D nonzero
            bounds = np.searchsorted(r, qidx)
            for j in range(b):
                lst[j].append(s + c[bounds[j]:bounds[j + 1]])
    rows_out = np.zeros((b, kk), np.int64)
    scores_out = np.zeros((b, kk))
    for j in range(b):
        cand = np.unique(np.concatenate(hi_c[j]))
        ex = exact_dot(fact_mat, cand, q[j])
        order = np.lexsort((cand, -ex))
        best_rows, best = cand[order][:kk], ex[order][:kk]
        low = np.unique(np.concatenate(lo_c[j]))
        lo = float(exact_dot(fact_mat, low, q[j]).min())
        hi = float(best[0])
        rows_out[j] = best_rows
        scores_out[j] = (best - lo) / (hi - lo) if hi > lo else 1.0
    return rows_out, scores_out


def nearest_rows(mat: np.ndarray, row_norm: float, vecs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each row of ``vecs``: the row of ``mat`` with the largest dot product (ties: lower
    row) and that product, exact in float64. One float32 BLAS product per block of rows serves
    all vectors; rows within its rounding margin of the best are rescored exactly, so the answer
    for a vector does not depend on the others (``row_norm``: :func:`max_row_norm` of ``mat``)."""
    v = np.atleast_2d(np.asarray(vecs, dtype=np.float32))
    b, n = v.shape[0], len(mat)
    if b == 0 or n == 0:
        return np.zeros(b, np.int64), np.zeros(b)
    vnorm = np.sqrt(np.einsum("ij,ij->i", v.astype(np.float64), v.astype(np.float64)))
    delta = 2.0 * (2.0 * v.shape[1] * _EPS32 * row_norm * vnorm + 1e-30)
    best = np.full(b, -np.inf, np.float32)
    cands: list[list[np.ndarray]] = [[] for _ in range(b)]
    for s, e in row_blocks(n):
        sc = np.asarray(mat[s:e], dtype=np.float32) @ v.T          # (m, b)
        top = sc.max(axis=0)
        best = np.maximum(best, top)
        for j in range(b):
            cands[j].append(s + np.flatnonzero(sc[:, j] >= np.float32(top[j] - delta[j])))
    rows, sims = np.zeros(b, np.int64), np.zeros(b)
    for j in range(b):
        c = np.concatenate(cands[j])
        c = c[np.asarray(mat[c], np.float32) @ v[j] >= np.float32(best[j] - delta[j])] if len(c) > 1 else c
        ex = exact_dot(mat, c, v[j])
        i = np.lexsort((c, -ex))[0]
        rows[j], sims[j] = c[i], ex[i]
    return rows, sims


def dense_first(order: np.ndarray, scores: np.ndarray, dense: np.ndarray, head: int, k: int
                ) -> tuple[np.ndarray, np.ndarray]:
    """Rank fusion: the ``head`` best passages by dense score first, then the graph ranking
    (``order``/``scores``, best first) without them; ``k`` rows kept. The head's scores are
    ``1 + min-max(dense)``, above any PPR probability, so scores stay in decreasing order."""
    if head <= 0:
        return order, scores
    top = top_k(dense, head)
    rest = ~np.isin(order, top)
    head_scores = 1.0 + min_max(np.asarray(dense, np.float64))[top]
    new_order = np.concatenate([top, order[rest]])[:k]
    new_scores = np.concatenate([head_scores, np.asarray(scores, np.float64)[rest]])[:k]
    return new_order, new_scores
