"""Synonymy edges: entity-to-entity kNN above a cosine threshold, by blocked matrix products.

Pure functions over arrays. Scores of kept pairs are recomputed exactly in float64 from the
stored float32 vectors, so a pair gets the same score whichever block or batch found it;
candidates are found with float32 products and a small margin below the threshold.
Neighbour lists are ordered by (score descending, neighbour id ascending).
"""
from __future__ import annotations

from typing import Iterable, Optional

import numpy as np

_MARGIN = 1e-4


def exact_scores(mat: np.ndarray, rows_a: np.ndarray, rows_b: np.ndarray) -> np.ndarray:
    """Cosine of row pairs (unit vectors) in float64, identical for identical inputs."""
    if len(rows_a) == 0:
        return np.zeros(0)
    a = mat[rows_a].astype(np.float64)
    b = mat[rows_b].astype(np.float64)
    return np.einsum("ij,ij->i", a, b)


def pairs_above(mat: np.ndarray, query_rows: np.ndarray, threshold: float,
                block_size: int = 4096) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """All (query_row, key_row, score) with cosine >= threshold, query_row != key_row.

    Keys are all rows of ``mat``. Memory is bounded by ``block_size x len(mat)`` floats.
    """
    qs, ks, ss = [], [], []
    query_rows = np.asarray(query_rows, dtype=np.int64)
    for start in range(0, len(query_rows), block_size):
        q = query_rows[start:start + block_size]
        sims = mat[q] @ mat.T  # (b, n) float32
        qi, ki = np.nonzero(sims >= threshold - _MARGIN)
        qi = q[qi]
        keep = qi != ki
        qi, ki = qi[keep], ki[keep]
        s = exact_scores(mat, qi, ki)
        keep = s >= threshold
        qs.append(qi[keep]); ks.append(ki[keep]); ss.append(s[keep])
    if not qs:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0)
    return np.concatenate(qs), np.concatenate(ks), np.concatenate(ss)


def top_lists(q: np.ndarray, k: np.ndarray, s: np.ndarray, ids: np.ndarray,
              max_neighbors: int) -> dict[str, dict[str, float]]:
    """Group pairs by query and keep each query's best ``max_neighbors`` (ties by id)."""
    out: dict[str, dict[str, float]] = {}
    if len(q) == 0:
        return out
    key_ids = ids[k].astype(str)
    order = np.lexsort((key_ids, -s, q))
    q, key_ids, s = q[order], key_ids[order], s[order]
    bounds = np.flatnonzero(np.diff(q)) + 1
    for chunk in np.split(np.arange(len(q)), bounds):
        src = ids[q[chunk[0]]]
        sel = chunk[:max_neighbors]
        out[src] = {key_ids[i]: float(s[i]) for i in sel}
    return out


def _trim(nb: dict[str, float], max_neighbors: int) -> dict[str, float]:
    items = sorted(nb.items(), key=lambda kv: (-kv[1], kv[0]))[:max_neighbors]
    return dict(items)


def update_synonymy(lists: dict[str, dict[str, float]], ids: np.ndarray, mat: np.ndarray,
                    eligible: np.ndarray, added: Iterable[str], removed: Iterable[str], *,
                    threshold: float, max_neighbors: int, block_size: int = 4096
                    ) -> dict[str, Optional[dict[str, float]]]:
    """Bring the neighbour lists up to date after entities were added and removed.

    ``lists`` maps each eligible entity id to its neighbours (as of before the change);
    ``ids``/``mat`` are the entities now present (rows sorted by id) and ``eligible`` marks
    which of them act as queries. Returns the changed lists: id -> new neighbour dict, or
    ``None`` for a source that no longer exists. The result equals recomputing every list from
    scratch, at a cost that grows with the number of added/removed entities, not the index.
    """
    row = {k: i for i, k in enumerate(ids)}
    added = [a for a in set(added) if a in row]
    removed = set(removed)
    changed: dict[str, Optional[dict[str, float]]] = {}
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

    if added:
        add_rows = np.array(sorted(row[a] for a in added), dtype=np.int64)
        q, k, s = pairs_above(mat, add_rows, threshold, block_size)
        # forward: new eligible entities get full lists
        fwd = eligible[q]
        new_lists = top_lists(q[fwd], k[fwd], s[fwd], ids, max_neighbors)
        for a in added:
            if eligible[row[a]]:
                changed[a] = new_lists.get(a, {})
        # reverse: old eligible entities that now see a new one
        is_added = np.zeros(len(ids), bool)
        is_added[add_rows] = True
        rev = ~is_added[k] & eligible[k]
        for qi, ki, sc in zip(q[rev], k[rev], s[rev]):
            old = ids[ki]
            if old in recompute:
                continue
            base = changed.get(old)
            if base is None:
                base = dict(lists.get(old, {}))
            base[ids[qi]] = float(sc)
            changed[old] = base
        for src, nb in list(changed.items()):
            if nb is not None and len(nb) > max_neighbors:
                changed[src] = _trim(nb, max_neighbors)

    if recompute:
        rows = np.array(sorted(row[r] for r in recompute), dtype=np.int64)
        q, k, s = pairs_above(mat, rows, threshold, block_size)
        full = top_lists(q, k, s, ids, max_neighbors)
        for src in recompute:
            changed[src] = full.get(src, {})
    return changed
