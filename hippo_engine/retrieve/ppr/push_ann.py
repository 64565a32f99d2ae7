"""The push's treatment of a prior known only at a few passages (:mod:`.ann_prior`): the tail passages
that could reach the top of the ranking get their own exact prior, the others are bounded.

In :meth:`.push.PushPPR.run_parts` a tail passage v (outside the pushed head) keeps
``c1(v) x prior(v)`` of its own prior (order zero plus its two-step return). With the prior known
only at the head (and a few more rows) and set to a fill elsewhere, v's estimate is off by
``c1(v) x (prior(v) - fill)``, at most ``c1(v) x gain_cap`` upwards. So every passage whose estimate
plus that gain reaches the K-th best estimate (K: the ranks the caller reads, or the refined
candidates if more) gets its exact prior (a dot product per passage), and the rest cannot pass the
K-th; this repeats while a correction lowers the K-th best (a few rounds at most). What stays
approximate is what the tail's deviations from the fill send to other nodes and, at the passages
left at the fill, their own prior; the bound of ``run_parts`` counts both with ``spread`` (the most a
tail prior can differ from the fill): :func:`tail_ratio` and :func:`own_bound`.
"""
from __future__ import annotations

import numpy as np

from hippo_engine.retrieve.ppr.push_prior import PassageSet, top_entries

#: most passages corrected per query (each costs a dot product with its stored vector)
MAX_CORRECTED = 65536
#: rounds of correction (each only where a previous round lowered the K-th best estimate)
MAX_ROUNDS = 4


def correct_tail(out: np.ndarray, prior: np.ndarray, ps: PassageSet, exact, refine: int
                 ) -> tuple[np.ndarray, np.ndarray]:
    """Correct ``out`` (estimates before normalisation) at the tail passages that could reach the top
    ``max(exact.want, refine)``; returns the prior with those passages' exact values (a copy) and the
    mask of passages whose prior is exact."""
    n = len(prior)
    known = exact.known_mask(n)
    prior = np.array(prior, dtype=np.float64, copy=True)
    k = min(n, max(int(exact.want), int(refine), 1))
    g = exact.gain_cap
    slack = ps.max_c1 * g                # (the largest gain: a first cut on out alone)
    left = MAX_CORRECTED
    theta = np.inf
    for _ in range(MAX_ROUNDS):
        t = float(out[top_entries(out, k)].min())
        if t >= theta or left <= 0:
            break
        theta = t
        cand = np.flatnonzero(out >= theta - slack - 1e-12 * abs(theta))
        reach = out[cand] + ps.c1[cand] * g
        keep = (reach >= theta) & ~known[cand]
        cand, reach = cand[keep], reach[keep]
        if len(cand) > left:
            cand = cand[top_entries(reach, left)]
        if len(cand) == 0:
            break
        d = exact.delta(cand)
        out[cand] += ps.c1[cand] * d
        prior[cand] += d
        known[cand] = True
        left -= len(cand)
    return prior, known


def tail_ratio(ps: PassageSet, prior: np.ndarray, m: float, top: np.ndarray, known: np.ndarray, spread: float,
               fill: float) -> float:
    """:meth:`.push_prior.PassageSet.tail_ratio` where the prior is exact only on ``known`` (a mask) and
    ``fill`` elsewhere: an unknown passage's |prior - m| is at most |fill - m| + ``spread``, and its
    1 / s(v) at most the largest over all passages (a bound without a pass over the passages)."""
    rows = np.flatnonzero(known)
    dev = np.abs(prior[rows] - m) * ps.inv_s[rows]
    dev[np.isin(rows, top)] = 0.0
    out = float(dev.max(initial=0.0))
    if len(rows) < len(prior):
        out = max(out, (abs(fill - m) + spread) * ps.max_inv_s)
    return out


def own_bound(ps: PassageSet, known: np.ndarray, spread: float) -> float:
    """The bound factor (per unit of strength) of what the passages left at the fill miss of their own
    prior: c1(v) x spread / s(v) at most (its largest over all passages, if any is left)."""
    return 0.0 if bool(known.all()) else ps.max_c1_inv_s * spread


def run_seed_table(pusher, table: tuple[np.ndarray, np.ndarray, np.ndarray], priors: list, passage_nodes: np.ndarray,
                   damping: float, r_max: float, head: int) -> np.ndarray:
    """PPR passage scores (n_passages, len(priors)) of the resets made of each column's entity seeds
    (``table``: column c, node, weight) and its prior from the index (``priors[c]``, an
    :class:`.ann_prior.AnnPrior`), by ``pusher.run_parts``: what ``run_split`` gives for the reset
    matrix of the same seeds and prior, without that matrix (a pass over every graph node to build
    it and one to read its seeds back, per query)."""
    sq, sn, sw = table
    n = len(passage_nodes)
    cols = []
    for c, prior in enumerate(priors):
        sel = (sq == c) & (sw != 0)
        idx, val = sn[sel], sw[sel]
        order = np.argsort(idx, kind="stable")     # (node order, as read from a reset vector)
        cols.append(pusher.run_parts(idx[order], val[order], prior.weights(n), passage_nodes, damping, r_max, head,
                                     exact_prior=prior)[0])
    return np.column_stack(cols) if cols else np.zeros((n, 0))
