"""Most probable walks from seeds to a target (the inverse P-distance, see :mod:`.explain.math`).

The walk's probability is d^len * prod P, so the single most probable walk from s to t is a
shortest path under the step cost c(a -> b) = -log(d W[a, b] / D[a]) (positive: d < 1). Its
probability over u_s (the backward row of t at s, the sum over all walks) is the share of seed s's
term that this one walk explains; the explanation shows the ``top`` walks with the largest weight x
probability, i.e. the smallest key = cost - log(w).

Bidirectional Dijkstra. Searching from t alone must settle every node closer than the farthest of
the top seeds (on MuSiQue's graphs a radius of 16-21 for a quarter of the targets, most of the
graph). Instead, one search from t over the reversed costs to radius a and one from each seed over
the forward costs to radius b (shared by all the targets of a query) meet on edges: mu(s, t) =
min over edges x -> y of dist_s(x) + c(x, y) + dist_t(y). Any walk of cost C <= a + b crosses from
prefix cost <= b to prefix cost > b on some edge x -> y, with x settled from s and y (suffix cost
< a) settled from t, so it is seen: if mu <= a + b it is the shortest cost, and otherwise every
walk costs more than a + b. Each walk also costs at least floor_s = -log(u_s + 2 tol), with u_s the
backward row within tol (a walk's probability is part of u_s). Once the ``top`` smallest exact keys
are at most every other seed's bound, max(a + b, floor) - log(w), they are the answer of the
unlimited search; otherwise the radius grows 1.5x (to at least 1). Seeds in another connected
component of the graph have no walk.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import dijkstra

from hippo_engine.retrieve.explain.math import BACKWARD_TOL, Operator

#: first total radius a + b without a backward row (a walk probability of e^-8, about 3e-4)
WALK_RADIUS = 8.0
#: with a backward row, the first total radius is the floors of the seeds likely on top plus this (on
#: MuSiQue a best walk's cost is its floor plus about 1.1 at the median, 2.9 at the 90th percentile,
#: 5.4 at most; the two half-radius searches are cheap, so a wide first radius beats growing it)
WALK_MARGIN = 5.0
#: beyond this total radius both searches run unlimited
FULL_RADIUS = 4096.0


@dataclass
class Walk:
    """The most probable walk from ``seed`` to the target: its ``nodes`` (seed first) and its
    probability d^len * prod P (``prob``)."""

    seed: int
    nodes: list[int]
    prob: float


@dataclass
class WalkCosts:
    """The step costs both ways: ``forward`` (a, b) = c(a -> b) and ``reverse`` (b, a) = c(a -> b)."""

    forward: sp.csr_matrix
    reverse: sp.csr_matrix

    @classmethod
    def of(cls, op: Operator, damping: float) -> WalkCosts:
        W = op.W.tocoo()
        cost = -np.log(damping * W.data / op.strength[W.row])
        return cls(sp.csr_matrix((cost, (W.row, W.col)), shape=W.shape),
                   sp.csr_matrix((cost, (W.col, W.row)), shape=W.shape))


def walk_costs(op: Operator, damping: float) -> sp.csr_matrix:
    """The reversed step costs: entry (b, a) = -log(d W[a, b] / D[a]), the cost of the step a -> b,
    so shortest paths from a target over this matrix are most probable walks to it."""
    return WalkCosts.of(op, damping).reverse


def _search(C: sp.csr_matrix, source: int, radius: float) -> tuple[np.ndarray, np.ndarray]:
    return dijkstra(C, directed=True, indices=source, return_predecessors=True, limit=radius)


def row_entries(M: sp.csr_matrix, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The stored entries of CSR rows ``rows``: (row, column, value) arrays."""
    lo, cnt = M.indptr[rows], M.indptr[rows + 1] - M.indptr[rows]
    idx = np.arange(int(cnt.sum())) + np.repeat(lo - (np.cumsum(cnt) - cnt), cnt)
    return np.repeat(rows, cnt), M.indices[idx], M.data[idx]


class _Ball:
    """One Dijkstra search to ``radius`` over the costs ``C`` (forward from a seed or reversed from
    a target): distances, predecessors and, on demand, the edges leaving its settled nodes."""

    def __init__(self, C: sp.csr_matrix, source: int, radius: float):
        self.C, self.radius = C, radius
        self.dist, self.pred = _search(C, source, radius)
        self.nodes = np.flatnonzero(np.isfinite(self.dist))
        #: how many edges leave the settled nodes
        self.size = int((C.indptr[self.nodes + 1] - C.indptr[self.nodes]).sum())
        self._edges: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None

    def edges(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(settled node, neighbour, dist(node) + edge cost) per edge leaving the settled nodes."""
        if self._edges is None:
            src, nbr, cost = row_entries(self.C, self.nodes)
            self._edges = (src, nbr, self.dist[src] + cost)
        return self._edges


def _meet(fwd: _Ball, back: _Ball) -> tuple[float, tuple[int, int] | None]:
    """min over edges x -> y of dist_s(x) + c(x, y) + dist_t(y) and its edge, enumerated from the
    side with fewer edges (the forward ball's edges leave x; the backward ball's enter y)."""
    if fwd.size <= back.size:
        src, nbr, base = fwd.edges()
        tot = base + back.dist[nbr]
    else:
        nbr, src, base = back.edges()
        tot = base + fwd.dist[src]
    if not tot.size:
        return np.inf, None
    j = int(np.argmin(tot))
    return float(tot[j]), (int(src[j]), int(nbr[j]))


class WalkSearch:
    """Most probable walks from one query's ``seeds`` (node -> reset weight) to any target; the
    seeds' forward searches are kept and reused by every target (``costs``: :class:`WalkCosts` of
    the operator at ``damping``, built here when not given). :meth:`plan` lets the seeds' first
    searches reach as far as the targets to come need, so that they are searched once."""

    def __init__(self, op: Operator, seeds: dict[int, float], damping: float, costs: WalkCosts | None = None):
        self.op = op
        self.seeds = {s: w for s, w in seeds.items() if w > 0}
        self.costs = WalkCosts.of(op, damping) if costs is None else costs
        self._balls: dict[int, _Ball] = {}
        self._hint = 0.0

    def plan(self, targets: list[int], rows: np.ndarray, top: int = 3, row_tol: float = BACKWARD_TOL) -> None:
        """Size the seeds' searches for ``targets`` (``rows``: their backward rows as columns)."""
        for j, t in enumerate(targets):
            start = self._start(t, top, rows[:, j], row_tol)
            if start is not None:
                self._hint = max(self._hint, min(start[-1], FULL_RADIUS) / 2.0)

    def _ball(self, s: int, radius: float) -> _Ball:
        ball = self._balls.get(s)
        if ball is None or ball.radius < radius:
            ball = self._balls[s] = _Ball(self.costs.forward, s, max(radius, self._hint))
        return ball

    def _start(self, target: int, top: int, row: np.ndarray | None, row_tol: float):
        """The live seeds (same component, not the target), their ids, log weights and cost floors,
        and the first total radius; None when no seed can reach ``target``."""
        op = self.op
        if op.isolated[target]:
            return None
        comp = op.components()
        live = [(s, w) for s, w in self.seeds.items() if s != target and comp[s] == comp[target]]
        if not live:
            return None
        ids = np.array([s for s, _ in live], np.int64)
        logw = np.log(np.array([w for _, w in live]))
        k = min(top, len(ids))
        floor = np.zeros(len(ids)) if row is None else np.maximum(-np.log(row[ids] + 2.0 * row_tol), 0.0)
        radius = WALK_RADIUS if row is None else float(floor[np.argsort(floor - logw)[:k]].max()) + WALK_MARGIN
        return live, ids, logw, floor, radius

    def best(self, target: int, top: int = 3, row: np.ndarray | None = None,
             row_tol: float = BACKWARD_TOL) -> list[Walk]:
        """The ``top`` walks to ``target`` with the largest weight x probability, best first
        (``row``: the target's backward row, entries within ``row_tol``; see the module docstring)."""
        start = self._start(target, top, row, row_tol)
        if start is None:
            return []
        live, ids, logw, floor, radius = start
        k = min(top, len(ids))
        while True:
            half = np.inf if radius > FULL_RADIUS else radius / 2.0
            back = _Ball(self.costs.reverse, target, half)
            mu, bound, meet = self._meet_all(ids, floor, logw, k, back)
            exact = np.isfinite(mu)
            keys = np.sort(mu[exact] - logw[exact])
            if (len(keys) >= k and keys[k - 1] <= bound) or len(keys) == len(ids):
                break
            radius = max(1.5 * radius, 1.0)
        ranked = sorted((float(mu[i]) - math.log(w), s, i) for i, (s, w) in enumerate(live) if exact[i])
        return [self._walk(s, target, meet[i], back.pred, float(mu[i])) for _, s, i in ranked[:top]]

    def _meet_all(self, ids: np.ndarray, floor: np.ndarray, logw: np.ndarray, k: int,
                  back: _Ball) -> tuple[np.ndarray, float, dict[int, tuple[int, int]]]:
        """Seeds in the order of their key bound floor - log w until ``k`` exact keys are at most
        the next one's bound: each seed's shortest cost mu where the searches prove it (else inf),
        the least key bound of the others and the meeting edges."""
        mu, bound = np.full(len(ids), np.inf), np.inf
        meet: dict[int, tuple[int, int]] = {}
        lower = floor - logw
        found: list[float] = []
        for i in np.argsort(lower, kind="stable").tolist():
            if len(found) >= k and sorted(found)[k - 1] <= lower[i]:
                return mu, min(bound, float(lower[i])), meet
            ball = self._ball(int(ids[i]), back.radius)
            cost, edge = _meet(ball, back)
            if edge is not None and cost <= back.radius + ball.radius:
                mu[i], meet[i] = cost, edge
                found.append(cost - float(logw[i]))
            else:
                bound = min(bound, float(max(back.radius + ball.radius, floor[i]) - logw[i]))
        return mu, bound, meet

    def _walk(self, s: int, target: int, edge: tuple[int, int], pt: np.ndarray, cost: float) -> Walk:
        x, y = edge
        pred = self._balls[s].pred
        head = [x]
        while head[-1] != s:
            head.append(int(pred[head[-1]]))
        tail = [y]
        while tail[-1] != target:
            tail.append(int(pt[tail[-1]]))
        return Walk(s, head[::-1] + tail, math.exp(-cost))


def best_walks(op: Operator, target: int, seeds: dict[int, float], damping: float, top: int = 3,
               costs: WalkCosts | None = None, row: np.ndarray | None = None,
               row_tol: float = BACKWARD_TOL) -> list[Walk]:
    """Each seed's most probable walk to ``target``; the ``top`` walks with the largest weight x
    probability, best first (one target; :class:`WalkSearch` shares the seeds' searches)."""
    return WalkSearch(op, seeds, damping, costs).best(target, top, row, row_tol)
