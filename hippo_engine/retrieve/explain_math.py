"""The mathematics of explaining a PPR ranking: exact contributions and most probable walks.

The operator is :class:`~hippo_engine.retrieve.ppr.PPRKernel`'s. With W the symmetric weight
matrix (self-loops dropped, repeated pairs added), D the node strengths and P = W D^-1 (column
stochastic on the nodes with edges), the kernel sanitises the reset (negative or NaN entries 0,
an all-zero reset uniform), solves (I - d P) y = r on the nodes with edges, sets y = r on the
isolated nodes (PRPACK's dangling rule) and returns x = y / sum(y).

Linearity (Jeh & Widom 2003). y = (I - d P)^-1 r is linear in r, so for a target node t

    x(t) = sum_s r_s * u_s / Y,    u = row t of (I - d P)^-1,    Y = sum(y)

and the term of reset entry s is r_s u_s / Y. ``Y`` is known in closed form: each column of P
sums to 1, so 1^T y = 1^T r / (1 - d) on the nodes with edges, plus r on the isolated ones. The
row u is one backward solve: u = e_t + d P^T u with P^T = D^-1 W row stochastic. Write
J(u) = e_t + d D^-1 W u; ||d D^-1 W||_inf <= d, so for any iterate u the exact row satisfies
||J(u) - u*||_inf <= d ||J(u) - u||_inf / (1 - d): stopping when the residual |J(u) - u| is below
``tol (1 - d) / d`` and returning J(u) bounds every |u_s - u*_s| by ``tol`` whatever produced u.
The iterates are Chebyshev-accelerated as :mod:`.ppr` does for the forward system (D^-1 W is
similar to D^-1/2 W D^-1/2, spectrum of d D^-1 W in [-d, d]; u_k+1 = w_k+1 J(u_k) + (1 - w_k+1)
u_k-1 with the classical weights; convergence factor about 0.27 per step at d = 0.5 against 0.5
for the plain iteration). The sum of all terms is then within ``tol * sum(r) / Y <= tol`` of the
exact x(t) (``BACKWARD_TOL`` = 1e-10 by default, far below the engine's own ``ppr_tol``).
Several targets are solved as columns of one block.

Walks (the inverse P-distance). y_s(t) = sum over walks s -> t of d^len * prod P, so the
single most probable walk from s to t is the shortest path under the step cost
-log(d W[a, b] / D[a]) (Dijkstra, here run backwards from t); its probability over u_s is the
share of seed s's term that this one walk explains.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

#: max-norm error bound of the backward rows (see the module docstring)
BACKWARD_TOL = 1e-10


def sanitise_reset(reset: np.ndarray) -> np.ndarray:
    """The reset exactly as the kernel reads it (before its scaling to sum 1, which cancels)."""
    r = np.asarray(reset, dtype=np.float64).copy()
    r[np.isnan(r) | (r < 0)] = 0.0
    if not r.sum() > 0:
        r[:] = 1.0
    return r


@dataclass
class Operator:
    """W (CSR, float64), the strengths and the isolated nodes of one graph, as the kernel sees it."""

    W: sp.csr_matrix
    strength: np.ndarray
    isolated: np.ndarray

    @classmethod
    def from_edges(cls, n: int, src: np.ndarray, dst: np.ndarray, weight: np.ndarray) -> Operator:
        src = np.asarray(src, np.int64)
        dst = np.asarray(dst, np.int64)
        w = np.asarray(weight, np.float64)
        keep = src != dst
        src, dst, w = src[keep], dst[keep], w[keep]
        W = sp.coo_matrix((np.concatenate([w, w]), (np.concatenate([src, dst]), np.concatenate([dst, src]))),
                          shape=(n, n)).tocsr()
        W.sum_duplicates()
        strength = np.bincount(src, weights=w, minlength=n) + np.bincount(dst, weights=w, minlength=n)
        return cls(W, strength, ~(strength > 0))

    @property
    def n(self) -> int:
        return int(self.W.shape[0])

    def normaliser(self, reset: np.ndarray, damping: float) -> float:
        """Y = sum(y) for the (sanitised) reset ``reset``, in closed form."""
        r = sanitise_reset(reset)
        return float(r[~self.isolated].sum() / (1.0 - damping) + r[self.isolated].sum())

    def backward(self, targets: Sequence[int], damping: float, tol: float = BACKWARD_TOL,
                 max_iter: int = 10_000) -> np.ndarray:
        """(n, len(targets)): column j is row ``targets[j]`` of (I - d P)^-1 (the isolated-node
        rule included), each entry within ``tol`` of the exact value (Chebyshev-accelerated
        fixed-point steps, stopped on the residual; see the module docstring)."""
        d = float(damping)
        M = self._step_matrix(d)
        tgt, cols = np.asarray(targets, np.int64), np.arange(len(targets))
        u = np.zeros((self.n, len(targets)))
        u[tgt, cols] = 1.0
        prev = np.zeros_like(u)
        stop = tol * (1.0 - d) / d
        # the residual after k steps is at most about rate^k (rate 0.27 at d = 0.5): check from near there
        first = max(0, int(math.log(stop) / math.log(max(d / (1.0 + math.sqrt(1.0 - d * d)), 1e-3))) - 3)
        omega = 1.0
        for it in range(max_iter):
            step = M @ u                            # J(u) = e_t + d D^-1 W u
            step[tgt, cols] += 1.0
            if not u.size or (it >= first and float(np.abs(step - u).max()) <= stop):
                return step                         # residual |J(u) - u| small: J(u) within tol
            # u_0 = 0, u_1 = e_t (= J(u_0)): the Chebyshev weights of :mod:`.ppr` from the second step
            omega = 2.0 / (2.0 - d * d) if it == 0 else 1.0 / (1.0 - d * d * omega / 4.0)
            step *= omega
            prev *= 1.0 - omega
            step += prev
            prev, u = u, step
        return u

    def _step_matrix(self, damping: float) -> sp.csr_matrix:
        """d D^-1 W (CSR; rows of isolated nodes empty), built once per damping."""
        cache = self.__dict__.setdefault("_steps", {})
        if damping not in cache:
            dinv = np.zeros(self.n)
            dinv[~self.isolated] = damping / self.strength[~self.isolated]
            cache[damping] = sp.csr_matrix(sp.diags(dinv) @ self.W)
        return cache[damping]

    def step_cost(self, a: int, b: int, damping: float) -> float:
        """-log of the probability that the walk at ``a`` steps to ``b``."""
        return -math.log(damping * self.W[a, b] / self.strength[a])


def contributions(op: Operator, reset: np.ndarray, u: np.ndarray, damping: float) -> tuple[np.ndarray, float]:
    """Each reset entry's term r_s u_s / Y of the target whose backward row is ``u``, and the
    target's PPR x(t) = their sum."""
    r = sanitise_reset(reset)
    terms = r * u / op.normaliser(reset, damping)
    return terms, float(terms.sum())


def exact_ppr(op: Operator, reset: np.ndarray, damping: float) -> np.ndarray:
    """The kernel's x by dense linear algebra in float64 (small graphs; the tests' reference)."""
    r = sanitise_reset(reset)
    n = op.n
    inv = np.zeros(n)
    inv[~op.isolated] = 1.0 / op.strength[~op.isolated]
    P = op.W.toarray() * inv[None, :]
    y = np.linalg.solve(np.eye(n) - damping * P, r)
    y[op.isolated] = r[op.isolated]
    return y / y.sum()


@dataclass
class Walk:
    """The most probable walk from ``seed`` to the target: its ``nodes`` (seed first) and its
    probability d^len * prod P (``prob``)."""

    seed: int
    nodes: list[int]
    prob: float


def walk_costs(op: Operator, damping: float) -> sp.csr_matrix:
    """The reversed step costs: entry (b, a) = -log(d W[a, b] / D[a]), the cost of the step a -> b
    (positive: d < 1), so shortest paths from a target over this matrix are most probable walks to it."""
    W = op.W.tocoo()
    cost = -np.log(damping * W.data / op.strength[W.row])
    return sp.csr_matrix((cost, (W.col, W.row)), shape=W.shape)


#: first Dijkstra radius of :func:`best_walks` (a walk probability of e^-8, about 3e-4); grown 1.5x as needed
WALK_RADIUS = 8.0


def best_walks(op: Operator, target: int, seeds: dict[int, float], damping: float, top: int = 3,
               costs: sp.csr_matrix | None = None) -> list[Walk]:
    """Each seed's most probable walk to ``target`` (Dijkstra from the target over the reversed
    step costs, :func:`walk_costs`; pass ``costs`` to reuse them); the ``top`` walks with the
    largest weight x probability, best first.

    Dijkstra stops at a radius L (``WALK_RADIUS``, grown 1.5x until enough is settled): a seed beyond it
    has key dist - log(w) > L - log(max w), so once ``top`` settled seeds have keys at most that (or
    every seed is settled, or L covers the whole graph) the answer is the unlimited search's."""
    from scipy.sparse.csgraph import dijkstra

    seeds = {s: w for s, w in seeds.items() if w > 0 and s != target}
    if not seeds or op.isolated[target]:
        return []
    C = walk_costs(op, damping) if costs is None else costs
    bound = -math.log(max(seeds.values()))
    radius = WALK_RADIUS
    while True:
        full = radius > 4096.0
        dist, pred = dijkstra(C, directed=True, indices=target, return_predecessors=True,
                              limit=np.inf if full else radius)
        ranked = sorted((dist[s] - math.log(w), s) for s, w in seeds.items() if np.isfinite(dist[s]))
        sure = sum(key <= radius + bound for key, _ in ranked)
        if full or len(ranked) == len(seeds) or sure >= top:
            break
        radius *= 1.5
    walks = []
    for _, s in ranked[:top]:
        nodes = [s]
        while nodes[-1] != target:
            nodes.append(int(pred[nodes[-1]]))
        walks.append(Walk(s, nodes, math.exp(-float(dist[s]))))
    return walks
