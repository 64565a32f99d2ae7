"""The mathematics of explaining a PPR ranking: the operator and the exact contributions.

The operator is :class:`~hippo_engine.retrieve.ppr.kernel.PPRKernel`'s. With W the symmetric weight
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
The row is computed by :mod:`.explain.solve` (low-degree nodes eliminated once per graph, the
remaining system solved by Chebyshev-accelerated Jacobi steps with the weights of :mod:`.ppr.kernel`, the
assembled row then checked on this residual of the whole graph). The sum of all terms is then
within ``tol * sum(r) / Y <= tol`` of the exact x(t) (``BACKWARD_TOL`` = 1e-10 by default, far
below the engine's own ``ppr_tol``). Several targets are solved as columns of one block.

Walks (the inverse P-distance): y_s(t) = sum over walks s -> t of d^len * prod P; the most
probable ones are found in :mod:`.explain.walks`.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from hippo_engine.retrieve.explain.solve import ELIM_DEGREE, BackwardSolver

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
        steps on the graph left after eliminating its low-degree nodes, then checked on the
        residual of the whole graph; see the module docstring and :mod:`.explain.solve`)."""
        return self.solver(damping).solve(targets, tol, max_iter)

    def solver(self, damping: float, max_degree: int = ELIM_DEGREE) -> BackwardSolver:
        """The backward solver at ``damping`` (its elimination built once per damping)."""
        cache = self.__dict__.setdefault("_solvers", {})
        key = (float(damping), max_degree)
        if key not in cache:
            cache[key] = BackwardSolver(self.W, self.strength, self.isolated, damping, max_degree)
        return cache[key]

    def components(self) -> np.ndarray:
        """Connected component label of every node (built once)."""
        if "_components" not in self.__dict__:
            from scipy.sparse.csgraph import connected_components
            self.__dict__["_components"] = connected_components(self.W, directed=False)[1]
        return self.__dict__["_components"]

    def step_cost(self, a: int, b: int, damping: float) -> float:
        """-log of the probability that the walk at ``a`` steps to ``b``."""
        return -math.log(damping * self.W[a, b] / self.strength[a])


def contributions(op: Operator, reset: np.ndarray, u: np.ndarray, damping: float,
                  total: float | None = None) -> tuple[np.ndarray, float]:
    """Each reset entry's term r_s u_s / Y of the target whose backward row is ``u``, and the
    target's PPR x(t) = their sum. ``total``: Y when already known (then ``reset`` must be sanitised)."""
    r = sanitise_reset(reset) if total is None else reset
    terms = r * u / (op.normaliser(reset, damping) if total is None else total)
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
