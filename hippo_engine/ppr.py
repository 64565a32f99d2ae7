"""Personalized PageRank as pure functions.

``transition_matrix`` builds, once per graph version, the column-stochastic matrix of the
undirected weighted graph; ``personalized_pagerank`` runs power iteration for one reset vector
or a batch of them (columns). Dangling nodes (no edges) send their mass back along the reset
distribution, as igraph's PRPACK solver does, so results match ``igraph.Graph.personalized_pagerank``.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp


def transition_matrix(n: int, src: np.ndarray, dst: np.ndarray, weight: np.ndarray,
                      dtype=np.float64) -> tuple[sp.csr_matrix, np.ndarray]:
    """Return (P, dangling) for an undirected graph given once per node pair.

    ``P[j, i] = w_ij / strength(i)`` (columns sum to 1 for non-dangling i); ``dangling`` is a
    boolean mask of nodes with zero strength.
    """
    rows = np.concatenate([src, dst])
    cols = np.concatenate([dst, src])
    w = np.concatenate([weight, weight]).astype(np.float64)
    strength = np.bincount(cols, weights=w, minlength=n)
    dangling = strength <= 0
    inv = np.zeros(n)
    inv[~dangling] = 1.0 / strength[~dangling]
    P = sp.csr_matrix((w * inv[cols], (rows, cols)), shape=(n, n), dtype=dtype)
    P.sum_duplicates()
    return P, dangling


def _row_sums(m: np.ndarray) -> np.ndarray:
    """Sum of each row, computed row by row (1-D pairwise sums), so the result for a row never
    depends on how many rows there are: NumPy's 2-D reductions may change summation order."""
    return np.array([row.sum() for row in m], dtype=m.dtype).reshape(-1, 1)


def personalized_pagerank(P: sp.csr_matrix, dangling: np.ndarray, reset: np.ndarray, damping: float = 0.5,
                          tol: float = 1e-10, max_iter: int = 200) -> np.ndarray:
    """Stationary distribution of the walk that follows an edge with probability ``damping``
    and jumps to the reset distribution otherwise.

    ``reset``: shape (n,) or (n, b); negative or NaN entries count as 0; each column is
    normalised to sum 1 (an all-zero column gives a uniform reset). Each column iterates until
    its L1 change is below ``tol``. Returns an array of the same shape, columns
    summing to 1.
    """
    r = np.asarray(reset, dtype=P.dtype)
    single = r.ndim == 1
    # Work on rows (b, n): every per-query sum is then a contiguous row reduction, computed the
    # same way whatever the batch size; columns of a sparse product are independent too. Rows
    # stop when they converge. So a query gets bit-identical scores alone or in a batch.
    r = np.ascontiguousarray(r[None, :] if single else r.T)
    r = np.where(np.isnan(r) | (r < 0), 0, r)
    sums = _row_sums(r)
    zero = sums[:, 0] <= 0
    if zero.any():
        r[zero] = 1.0 / r.shape[1]
        sums = _row_sums(r)
    r = r / sums
    x = r.copy()
    has_dangling = bool(dangling.any())
    active = np.arange(x.shape[0])
    for _ in range(max_iter):
        xa, ra = x[active], r[active]
        nxt = damping * np.ascontiguousarray((P @ xa.T).T)
        if has_dangling:
            nxt += damping * ra * _row_sums(xa[:, dangling])
        nxt += (1.0 - damping) * ra
        nxt /= _row_sums(nxt)
        delta = _row_sums(np.abs(nxt - xa))[:, 0]
        x[active] = nxt
        active = active[delta >= tol]
        if len(active) == 0:
            break
    return x[0] if single else np.ascontiguousarray(x.T)
