"""A walk from a nearby walk: the second walk's passage scores from the first's, by linearity.

The second walk (``second_hop``, :mod:`.second_walk`) starts from a reset vector R2 that differs from
the first walk's R only at a few entity nodes: both carry the same passage prior (a weight on every
passage, nearly all of the reset's mass), and ``"wide"`` adds the seeds of the query's next sentence
(on 2Wiki a median of 2 entries, at most 8; under 1% of the mass in the median). Solving R2 from scratch
costs a whole walk over the graph. Since PPR is linear in its reset,

    Y(R2) = Y(R) + Y(D),  D = R2 - R,

where Y is the kernel's unnormalised solution (``(I - d P)^-1 r`` on nodes with edges, ``r`` itself at
isolated nodes) and the kernel's scores are ``Y / sum(Y)``. The first walk gives ``Y(R)`` up to its sum
``T1 = (sum R - R_iso) / (1 - d) + R_iso`` (mass never leaves the nodes with edges, so that sum is exact),
and the sparse, signed D is pushed (:meth:`.push.PushPPR.push`, forward push: it reads only the edges near
D's nodes). The scores of R2 are then ``(x1 T1 + Y(D)) / (T1 + sum Y(D))`` with ``sum Y(D)`` exact too.

Error. Pushing D with threshold ``t`` per unit of strength leaves ``|pi(v) - p_hat(v)| <= d t s(v) |D|_1``
at each node v (s: its strength; ``retrieve/ppr/push.py``). The threshold is set per unit of the whole reset's
mass, ``t = r_max sum(R2) / |D|_1`` (``second_walk_r_max``), so D's push stops at the precision a push of
all of R2 would reach, however small D is: a score of R2 (which sums to 1) moves by at most about
``d r_max s(v)`` besides the first walk's own tolerance (``ppr_tol``). Scores are not bit-identical to a
fresh solve; rankings are the same but for near-ties (``reproduce/results/recall``: the share of questions
whose top 20 changes, and the recall table).
"""
from __future__ import annotations

import numpy as np

from hippo_engine.retrieve.ppr.kernel import PPRKernel
from hippo_engine.retrieve.ppr.push import PushPPR


def _clean(m: np.ndarray) -> np.ndarray:
    """The reset as the kernel reads it: negative or NaN entries count as 0 (one pass, no copy when
    there are none: ``min`` is NaN or negative exactly when one is)."""
    if m.size == 0 or m.min() >= 0:
        return m
    return np.where(np.isnan(m) | (m < 0), 0.0, m)


def walk_totals(kernel: PPRKernel, R: np.ndarray, damping: float, mass: np.ndarray | None = None) -> np.ndarray:
    """``sum(Y(r))`` of each (clean) reset column: the kernel's unnormalised total (see the module's note);
    ``mass``: the columns' sums when already known."""
    mass = R.sum(axis=0) if mass is None else mass
    iso = R[kernel.isolated].sum(axis=0) if kernel.isolated.any() else np.zeros(R.shape[1])
    return (mass - iso) / (1.0 - damping) + iso


def passage_rows(n: int, passage_nodes: np.ndarray) -> np.ndarray:
    """node -> its passage row (-1 for other nodes), over ``n`` nodes."""
    row_of = np.full(n, -1, dtype=np.int64)
    row_of[passage_nodes] = np.arange(len(passage_nodes))
    return row_of


def updated_walk(kernel: PPRKernel, pusher: PushPPR, passage_nodes: np.ndarray, first: np.ndarray,
                 R: np.ndarray, R2: np.ndarray, damping: float, r_max: float,
                 row_of: np.ndarray | None = None) -> np.ndarray:
    """Passage scores (n_passages, b) of reset columns ``R2`` from ``first``, the kernel's passage scores of
    ``R`` (both (n_nodes, b), every column with positive mass). A column whose reset did not change keeps
    its first scores exactly. ``row_of``: :func:`passage_rows` of ``passage_nodes``, when the caller keeps it."""
    Rc, R2c = _clean(R), _clean(R2)
    changed = np.flatnonzero((Rc != R2c).any(axis=1))     # the few rows where the resets differ
    D = R2c[changed] - Rc[changed]                         # (rows, b)
    cols = np.flatnonzero(D.any(axis=0))
    out = np.array(first, dtype=np.float64, copy=True)
    if not len(cols):
        return out
    mass1 = Rc.sum(axis=0)                                 # (whole columns: no copy of the block)
    t1 = walk_totals(kernel, Rc, damping, mass1)[cols]
    mass2 = (mass1 + D.sum(axis=0))[cols]
    if row_of is None:
        row_of = passage_rows(kernel.n, passage_nodes)
    iso_rows = kernel.isolated[changed]
    alpha = 1.0 - damping
    for i, c in enumerate(cols.tolist()):
        at = np.flatnonzero(D[:, c])
        d, nodes, iso = D[at, c], changed[at], iso_rows[at]
        y = out[:, c] * t1[i]
        total = t1[i] + d[iso].sum()
        ys, vals = nodes[iso], d[iso]                       # isolated: Y(d) = d there
        if not iso.all():   # r_max per unit of the whole reset's mass: push stops relative to |d|_1
            live = ~iso
            pushed, est, _ = pusher.push(nodes[live], d[live], damping, r_max * mass2[i] / np.abs(d[live]).sum())
            ys, vals = np.concatenate([ys, pushed]), np.concatenate([vals, est / alpha])
            total += d[live].sum() / alpha
        rows = row_of[ys]
        hit = rows >= 0
        np.add.at(y, rows[hit], vals[hit])
        out[:, c] = y / total
    return out


__all__ = ["passage_rows", "updated_walk", "walk_totals"]
