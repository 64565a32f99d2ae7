"""Synonymy edges: entity-to-entity kNN above a cosine threshold, by blocked matrix products.

Pure functions over arrays. Scores of kept pairs are recomputed exactly in float64 from the
stored float32 vectors, so a pair gets the same score whichever block or batch found it;
candidates are found with float32 products and a small margin below the threshold.
Neighbour lists are ordered by (score descending, neighbour id ascending).
"""
from __future__ import annotations

from collections.abc import Iterable

import numpy as np

_MARGIN = 1e-4


def exact_scores(mat: np.ndarray, rows_a: np.ndarray, rows_b: np.ndarray) -> np.ndarray:
    """Cosine of row pairs (unit vectors) in float64, identical for identical inputs."""
    if len(rows_a) == 0:
        return np.zeros(0)
    a = mat[rows_a].astype(np.float64)
    b = mat[rows_b].astype(np.float64)
    return np.einsum("ij,ij->i", a, b)


#: Upper bound on the floats of one similarity block (64 MB), whatever the index size.
BLOCK_ELEMENTS = 1 << 24


def _hits(a_mat: np.ndarray, b_mat: np.ndarray, threshold: float) -> tuple[np.ndarray, np.ndarray]:
    sims = a_mat @ b_mat.T  # float32 block
    # 1-D search of the flat mask: several times faster than a 2-D nonzero
    return np.divmod(np.flatnonzero(sims >= np.float32(threshold - _MARGIN)), sims.shape[1])


def pairs_above(mat: np.ndarray, query_rows: np.ndarray, threshold: float,
                block_size: int = 4096) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """All (query_row, key_row, score) with cosine >= threshold, query_row != key_row.

    Keys are all rows of ``mat``. Pairs of two query rows are computed once (blocks on and
    above the diagonal) and reported in both directions, so the all-vs-all case costs half
    the products; query rows against the other rows go block by block. Memory is bounded
    by one ``block_size`` x ``max(block_size, BLOCK_ELEMENTS / block_size)`` float32 block.
    """
    n = len(mat)
    Q = np.unique(np.asarray(query_rows, dtype=np.int64))
    empty = (np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0))
    if len(Q) == 0 or n == 0:
        return empty
    is_q = np.zeros(n, bool)
    is_q[Q] = True
    others = np.flatnonzero(~is_q)
    bq = max(1, int(block_size))
    bk = max(bq, BLOCK_ELEMENTS // bq)
    qs, ks, ss = [], [], []

    def keep(ra: np.ndarray, rb: np.ndarray, both: bool) -> None:
        sc = exact_scores(mat, ra, rb)
        m = sc >= threshold
        ra, rb, sc = ra[m], rb[m], sc[m]
        qs.append(ra)
        ks.append(rb)
        ss.append(sc)
        if both:
            qs.append(rb)
            ks.append(ra)
            ss.append(sc)

    for i0 in range(0, len(Q), bq):
        qi = Q[i0:i0 + bq]
        A = mat[qi]
        for j0 in range(i0, len(Q), bq):
            qj = Q[j0:j0 + bq]
            a, b = _hits(A, A if j0 == i0 else mat[qj], threshold)
            if j0 == i0:
                upper = a < b
                a, b = a[upper], b[upper]
            keep(qi[a], qj[b], True)
        for k0 in range(0, len(others), bk):
            ok = others[k0:k0 + bk]
            a, b = _hits(A, mat[ok], threshold)
            keep(qi[a], ok[b], False)
    if not qs:
        return empty
    return np.concatenate(qs), np.concatenate(ks), np.concatenate(ss)


#: query rows scored against one block of stored rows at a time by :func:`streamed_pairs`
STREAM_QUERY_ROWS = 4096


def streamed_pairs(query_rows: np.ndarray, query_vecs: np.ndarray, blocks, threshold: float
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`pairs_above` for a matrix read block by block (``blocks``: ``(first row, float32
    block)`` in row order, e.g. a database table): every (query_row, key_row, score) with the
    exact float64 cosine >= threshold, query_row != key_row. ``query_vecs`` are the query rows'
    own stored vectors (float32). The same pairs and scores as :func:`pairs_above` (candidates by
    float32 products with the same margin, scores of the same float64 products), in another order;
    memory is one block and ``STREAM_QUERY_ROWS`` query rows at a time."""
    Q = np.asarray(query_rows, dtype=np.int64)
    A = np.asarray(query_vecs, dtype=np.float32)
    qs, ks, ss = [], [], []
    if len(Q):
        for start, blk in blocks:
            blk64 = None
            for i0 in range(0, len(Q), STREAM_QUERY_ROWS):
                a, b = _hits(A[i0:i0 + STREAM_QUERY_ROWS], blk, threshold)
                a = a + i0
                ok = Q[a] != start + b
                a, b = a[ok], b[ok]
                if not len(a):
                    continue
                if blk64 is None:
                    blk64 = blk.astype(np.float64)
                sc = np.einsum("ij,ij->i", A[a].astype(np.float64), blk64[b])
                m = sc >= threshold
                qs.append(Q[a[m]])
                ks.append(start + b[m])
                ss.append(sc[m])
    if not qs:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0)
    return np.concatenate(qs), np.concatenate(ks), np.concatenate(ss)


def top_lists(q: np.ndarray, k: np.ndarray, s: np.ndarray, ids: np.ndarray,
              max_neighbors: int) -> dict[str, dict[str, float]]:
    """Group pairs by query and keep each query's best ``max_neighbors`` (ties by id).

    ``ids`` must be sorted (store order), so a tie on the score goes to the lower row."""
    out: dict[str, dict[str, float]] = {}
    if len(q) == 0:
        return out
    order = np.lexsort((k, -s, q))
    q, k, s = q[order], k[order], s[order]
    starts = np.flatnonzero(np.r_[True, q[1:] != q[:-1]])
    rank = np.arange(len(q)) - np.repeat(starts, np.diff(np.r_[starts, len(q)]))
    sel = rank < max_neighbors
    q, k, s = q[sel], k[sel], s[sel]
    starts = np.flatnonzero(np.r_[True, q[1:] != q[:-1]])
    ends = np.r_[starts[1:], len(q)]
    kid = ids[k].tolist()
    sc = s.tolist()
    src = ids[q[starts]].tolist()
    for name, a, b in zip(src, starts.tolist(), ends.tolist(), strict=False):
        out[name] = dict(zip(kid[a:b], sc[a:b], strict=False))
    return out


def rows_of(ids: np.ndarray, keys) -> np.ndarray:
    """Rows of ``keys`` in the sorted id array ``ids`` (keys that are absent are left out)."""
    q = np.empty(len(keys), dtype=object)
    q[:] = list(keys)
    if len(q) == 0 or len(ids) == 0:
        return np.zeros(0, np.int64)
    pos = np.searchsorted(ids, q)
    ok = pos < len(ids)
    ok[ok] = ids[pos[ok]] == q[ok]
    return np.sort(pos[ok]).astype(np.int64)


def _trim(nb: dict[str, float], max_neighbors: int) -> dict[str, float]:
    items = sorted(nb.items(), key=lambda kv: (-kv[1], kv[0]))[:max_neighbors]
    return dict(items)


def update_synonymy(lists: dict[str, dict[str, float]], ids: np.ndarray, mat: np.ndarray | None,
                    eligible: np.ndarray, added: Iterable[str], removed: Iterable[str], *,
                    threshold: float, max_neighbors: int, block_size: int = 4096, pairs=None
                    ) -> dict[str, dict[str, float] | None]:
    """Bring the neighbour lists up to date after entities were added and removed.

    ``lists`` maps each eligible entity id to its neighbours (as of before the change);
    ``ids``/``mat`` are the entities now present (rows sorted by id) and ``eligible`` marks
    which of them act as queries. Returns the changed lists: id -> new neighbour dict, or
    ``None`` for a source that no longer exists. The result equals recomputing every list from
    scratch, at a cost that grows with the number of added/removed entities, not the index.
    ``pairs(query_rows) -> (q, k, s)`` finds the pairs above the threshold (default:
    :func:`pairs_above` on ``mat``; a writer without the matrix passes :func:`streamed_pairs`).
    """
    if pairs is None:
        def pairs(rows):
            return pairs_above(mat, rows, threshold, block_size)
    add_rows = rows_of(ids, sorted(set(added)))
    changed, recompute = _after_removal(lists, set(removed), max_neighbors)
    if len(add_rows):
        _add_entities(changed, recompute, lists, ids, eligible, add_rows, pairs(add_rows), max_neighbors)
    if recompute:
        rows = rows_of(ids, sorted(recompute))
        q, k, s = pairs(rows)
        full = top_lists(q, k, s, ids, max_neighbors)
        for src in recompute:
            changed[src] = full.get(src, {})
    return changed


def _after_removal(lists: dict[str, dict[str, float]], removed: set[str], max_neighbors: int
                   ) -> tuple[dict[str, dict[str, float] | None], set[str]]:
    """(changed lists, sources to recompute) after ``removed`` entities left: a removed source's
    list goes (``None``); a list that named a removed entity loses it, or, when it was full (a
    neighbour beyond the cut may move up), is recomputed."""
    changed: dict[str, dict[str, float] | None] = {}
    recompute: set[str] = set()
    for src in removed:
        if src in lists:
            changed[src] = None
    if removed:
        for src, nb in lists.items():
            if src in removed:
                continue
            if any(d in removed for d in nb):
                if len(nb) >= max_neighbors:  # a neighbour beyond the cut may move up
                    recompute.add(src)
                else:
                    changed[src] = {d: w for d, w in nb.items() if d not in removed}
    return changed, recompute


def _add_entities(changed: dict[str, dict[str, float] | None], recompute: set[str],
                  lists: dict[str, dict[str, float]], ids: np.ndarray, eligible: np.ndarray,
                  add_rows: np.ndarray, found: tuple[np.ndarray, np.ndarray, np.ndarray],
                  max_neighbors: int) -> None:
    """Update ``changed`` for the added entities (rows ``add_rows``; ``found`` their pairs above
    the threshold): full lists for the new eligible ones, the new neighbour for old ones."""
    q, k, s = found
    # forward: new eligible entities get full lists
    fwd = eligible[q]
    new_lists = top_lists(q[fwd], k[fwd], s[fwd], ids, max_neighbors)
    for a in ids[add_rows[eligible[add_rows]]].tolist():
        changed[a] = new_lists.get(a, {})
    # reverse: old eligible entities that now see a new one
    is_added = np.zeros(len(ids), bool)
    is_added[add_rows] = True
    rev = ~is_added[k] & eligible[k]
    for new_id, old, sc in zip(ids[q[rev]].tolist(), ids[k[rev]].tolist(), s[rev].tolist(), strict=False):
        if old in recompute:
            continue
        base = changed.get(old)
        if base is None:
            base = dict(lists.get(old, {}))
        base[new_id] = sc
        changed[old] = base
    for src, nb in list(changed.items()):
        if nb is not None and len(nb) > max_neighbors:
            changed[src] = _trim(nb, max_neighbors)
