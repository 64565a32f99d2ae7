"""Backward rows of (I - d P)^-1 for explanations: low-degree nodes eliminated once per graph, the
rest solved by Chebyshev-accelerated Jacobi steps, every row certified on the original operator.

The system. With W the symmetric weight matrix and D the node strengths (see :mod:`.explain.math`),
the backward row u of a target t solves u = e_t + d D^-1 W u, i.e. A u = b with A = D - d W and
b = D_t e_t (an isolated t has u = e_t). A is symmetric with off-diagonal entries -N (N = d W >= 0)
and row sums of N equal to d times the diagonal.

Elimination (block Gaussian elimination, the Schur complement). Take a set E of nodes with at most
``ELIM_DEGREE`` neighbours, no two of them adjacent, so A_EE is diagonal. With K the other nodes,

    A' = A_KK - A_KE A_EE^-1 A_EK,   b' = b_K - A_KE A_EE^-1 b_E,   u_E = A_EE^-1 (b_E - A_EK u_K),

and A' u_K = b' has the same u_K. A' is again diag' - N' with N' >= 0: eliminating v with
neighbours a, b adds N_av N_vb / A_vv to N'_ab and removes N_av^2 / A_vv from A'_aa. A node with k
neighbours adds at most k (k - 1) / 2 edges and removes k; a round that would multiply the work of a
Jacobi step (entries + 2 x nodes) by more than ``GROWTH`` is not applied. Rounds (each on the
reduced matrix) go on until no node qualifies: on the MuSiQue graphs of ``reproduce explain`` the
OpenIE index goes from 18118 nodes and 86k entries to 2249 nodes and 39k entries in 14 rounds, the
NER index (denser) from 14824 and 169k to 5103 and 107k in 13 (about 3.5x and 1.8x less work per
block for the same number of steps).

Why the Chebyshev weights of :mod:`.ppr.kernel` still hold. Write s_v for the row sum of N at v and
delta_v for A_vv, with s_v <= d delta_v (true for A). Eliminating v changes row a (N_av = alpha) to
row sum s_a - alpha + alpha (s_v - alpha) / delta_v and diagonal delta_a - alpha^2 / delta_v; the
invariant s <= d delta survives because s_v - (1 - d) alpha <= delta_v, and delta stays positive.
So the Jacobi matrix D'^-1 N' of the reduced system has max row sum <= d and is similar to the
symmetric D'^-1/2 N' D'^-1/2: its spectrum lies in [-d, d], the interval the weights assume.

Certification. Whatever floating point did to the elimination, the assembled row u is checked on
the original operator, J(u) = e_t + d D^-1 W u: the solver returns J(u) once |J(u) - u|_inf <=
tol (1 - d) / d, which bounds every entry's error by ``tol`` exactly as :mod:`.explain.math` states
(in exact arithmetic the full residual is at most the reduced one: it is D_K^-1 (b' - A' u_K) on K,
with D_K >= diag', and 0 on E). Should rounding leave it above, plain fixed-point steps, each
shrinking the residual by d, finish the row.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import scipy.sparse as sp

#: nodes with at most this many neighbours are eliminated (0: none)
ELIM_DEGREE = 8
#: a round of elimination that would multiply the work of a step (entries + 2 x nodes) by more than
#: this is not applied, and elimination stops there (a guard against fill on dense graphs)
GROWTH = 1.25


def _low_degree_set(N: sp.csr_matrix, alive: np.ndarray, max_degree: int) -> np.ndarray:
    """Alive nodes with at most ``max_degree`` neighbours, no two adjacent (of two adjacent
    candidates the one with the smaller index wins)."""
    n = N.shape[0]
    deg = np.diff(N.indptr)
    cand = alive & (deg <= max_degree)
    rows = np.repeat(np.arange(n), deg)
    clash = cand[rows] & cand[N.indices] & (N.indices < rows)
    return np.flatnonzero(cand & (np.bincount(rows[clash], minlength=n) == 0))


class BackwardSolver:
    """Backward rows of one graph (``W`` CSR, ``strength``, ``isolated``) at one damping: the
    elimination is done once here, :meth:`solve` then costs a small Chebyshev solve per block."""

    def __init__(self, W: sp.csr_matrix, strength: np.ndarray, isolated: np.ndarray, damping: float,
                 max_degree: int = ELIM_DEGREE):
        self.d = d = float(damping)
        self.n = n = int(W.shape[0])
        self.strength, self.isolated = strength, isolated
        inv = np.zeros(n)
        inv[~isolated] = d / strength[~isolated]
        #: d D^-1 W, the original step (the certification)
        self.step = sp.csr_matrix(sp.diags(inv) @ W)
        N = sp.csr_matrix(W * d)
        N.eliminate_zeros()
        diag = np.where(isolated, 0.0, strength).astype(np.float64)
        alive = ~isolated
        #: per round: the eliminated nodes E, their rows of N (E x n, at that round) and A_EE
        self.rounds: list[tuple[np.ndarray, sp.csr_matrix, np.ndarray]] = []
        self.round_of = np.full(n, -1, np.int64)
        self.pos_in_round = np.full(n, -1, np.int64)
        work = N.nnz + 2 * int(alive.sum())         # about what one Jacobi step costs
        while max_degree > 0:
            E = _low_degree_set(N, alive, max_degree)
            if not len(E):
                break
            NE, dE = sp.csr_matrix(N[E]), diag[E].copy()
            fill = sp.csr_matrix(NE.T @ sp.diags(1.0 / dE) @ NE)
            keep = np.ones(n)
            keep[E] = 0.0
            fd = fill.diagonal()
            fill.setdiag(0.0)
            N2 = sp.csr_matrix(sp.diags(keep) @ N @ sp.diags(keep) + fill)
            N2.eliminate_zeros()
            work2 = N2.nnz + 2 * (int(alive.sum()) - len(E))
            if work2 > GROWTH * work:                   # the fill would outweigh the nodes removed
                break
            N, work = N2, work2
            diag -= fd
            alive[E] = False
            self.round_of[E] = len(self.rounds)
            self.pos_in_round[E] = np.arange(len(E))
            self.rounds.append((E, NE, dE))
        #: the nodes left, their diagonal and Jacobi matrix diag^-1 N (core-indexed)
        self.core = np.flatnonzero(alive)
        self.core_pos = np.full(n, -1, np.int64)
        self.core_pos[self.core] = np.arange(len(self.core))
        self.core_diag = diag[self.core]
        self.core_step = sp.csr_matrix(sp.diags(1.0 / self.core_diag) @ N[self.core][:, self.core])

    def solve(self, targets: Sequence[int], tol: float, max_iter: int = 10_000) -> np.ndarray:
        """(n, len(targets)): column j is row ``targets[j]`` of (I - d P)^-1, each entry within
        ``tol`` of the exact value (see the module docstring)."""
        tgt = np.asarray(targets, np.int64)
        cols = np.arange(len(tgt))
        if not len(tgt):
            return np.zeros((self.n, 0))
        stop = tol * (1.0 - self.d) / self.d
        b = self._rhs(tgt)
        rhs = np.zeros((len(self.core), len(tgt)))
        for v, val in b.items():
            if self.round_of[v] < 0:
                rhs[self.core_pos[v]] = val / self.core_diag[self.core_pos[v]]
        u = np.zeros((self.n, len(tgt)))
        u[self.core] = self._core_solve(rhs, stop, max_iter)
        for r in range(len(self.rounds) - 1, -1, -1):       # u_E = A_EE^-1 (b_E + N_EK u_K)
            E, NE, dE = self.rounds[r]
            uE = NE @ u
            for v in [v for v in b if self.round_of[v] == r]:
                uE[self.pos_in_round[v]] += b[v]
            uE /= dE[:, None]
            u[E] = uE
        iso = self.isolated[tgt]
        u[tgt[iso], cols[iso]] = 1.0
        for _ in range(max_iter):
            step = self.step @ u                # J(u) = e_t + d D^-1 W u
            step[tgt, cols] += 1.0
            np.subtract(step, u, out=u)
            if float(np.abs(u, out=u).max()) <= stop:
                break
            u = step
        return step

    def _rhs(self, tgt: np.ndarray) -> dict[int, np.ndarray]:
        """The nonzero rows of b = D_t e_t (one column per target), carried through the rounds
        (b' = b_K + N_KE A_EE^-1 b_E) where a nonzero of b is eliminated (a few rows: an
        eliminated node has at most ``ELIM_DEGREE`` neighbours)."""
        k = len(tgt)
        b: dict[int, np.ndarray] = {}
        for j, t in enumerate(tgt.tolist()):
            if not self.isolated[t]:
                b.setdefault(t, np.zeros(k))[j] += self.strength[t]
        for r, (_, NE, dE) in enumerate(self.rounds):
            for v in [v for v in b if self.round_of[v] == r]:
                p = int(self.pos_in_round[v])
                f = b[v] / dE[p]
                for i in range(NE.indptr[p], NE.indptr[p + 1]):
                    b.setdefault(int(NE.indices[i]), np.zeros(k))
                    b[int(NE.indices[i])] += NE.data[i] * f
        return b

    def _core_solve(self, rhs: np.ndarray, stop: float, max_iter: int) -> np.ndarray:
        """x = rhs + S x (S the core's Jacobi matrix) by Chebyshev-accelerated steps from x_0 = 0,
        x_1 = rhs; returns J(x) once |J(x) - x|_inf <= stop."""
        S, d = self.core_step, self.d
        if not rhs.size:
            return rhs
        prev, x = np.zeros_like(rhs), rhs.copy()
        # the residual after k steps is about 2 rate^k (rate 0.27 at d = 0.5): check from near there
        rate = max(d / (1.0 + math.sqrt(1.0 - d * d)), 1e-3)
        first = max(0, int(math.log(stop / 2.0) / math.log(rate)) - 4)
        omega = 1.0
        for it in range(max_iter):
            step = S @ x
            step += rhs
            if it >= first and float(np.abs(step - x).max()) <= stop:
                return step
            omega = 2.0 / (2.0 - d * d) if it == 0 else 1.0 / (1.0 - d * d * omega / 4.0)
            step *= omega
            prev *= 1.0 - omega
            step += prev
            prev, x = x, step
        return x
