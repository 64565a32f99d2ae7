"""Approximate Personalized PageRank by forward push (Andersen, Chung and Lang 2006), batched
over a frontier, on the same operator as :class:`~hippo_engine.retrieve.ppr.PPRKernel`.

What it computes. With alpha = 1 - damping, P = W D^-1 (the walk of the kernel) and r the
reset normalised to sum 1, the PPR vector is pi = alpha sum_k (damping P)^k r (the kernel's
answer, up to the rescaling of mass lost at isolated nodes). Push keeps an estimate p and a
residual q with the invariant pi = p + PPR(q): pushing node u moves alpha q(u) into p(u) and
spreads damping q(u) over u's neighbours in proportion to the edge weights. Every node whose
residual is at least ``r_max x s(u)`` (s: the node's strength, its summed edge weight) is
pushed; all such nodes of a round are pushed at once (one gather over their CSR rows, one
sorted accumulation), and only the nodes a round touched can join the next frontier, so a
round costs the edges of its frontier, not the graph.

Stopping. When no residual reaches ``r_max x s(u)`` the remaining residual is settled to order
zero: p_hat = p + alpha q (PPR(q) >= alpha q, so this only tightens the estimate; it is what
lets a dense reset, e.g. HippoRAG 2's passage prior on every passage, cost only the passages
above the threshold: the rest keep their own alpha x prior and lose only what would have
flowed on from them).

Error bound (undirected graph, as here). The part still missing is PPR(damping P q), whose
residual at x is at most damping r_max s(x); since s(x) pi_x(v) = s(v) pi_v(x) on an
undirected graph, for every node v

    0 <= pi(v) - p_hat(v) <= damping x r_max x s(v),

and the L1 error is at most damping x sum(q) (reported as ``l1_bound``). Both are on the
unnormalised pi of a reset summing to 1. PPR is linear in the reset, so the entity-seed part
and the passage-prior part of a query may be pushed separately and added (``push_ppr`` of the
sum equals the sum of the parts within the sum of their bounds); one push of the whole reset
does the same work in one pass, which is what :meth:`PushPPR.run` does.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np

from hippo_engine.retrieve.ppr import PPRKernel

#: default residual threshold per unit of strength (measured, see reproduce/results/ppr_scale)
DEFAULT_R_MAX = 1e-5
#: default number of prior passages pushed by ``run_split`` (the rest settled to order zero)
DEFAULT_HEAD = 100
#: below this many edge entries a round accumulates by sorting the touched nodes; above it, by a
#: dense bincount over all nodes (cheaper once a frontier reaches a good share of the graph)
_SORT_LIMIT_SHARE = 8


@dataclass
class PushStats:
    """What one push did: rounds, nodes pushed, edge entries read, the residual left (L1) and
    the resulting bounds (per node: ``node_bound x s(v)``; L1: ``l1_bound``)."""
    rounds: int
    pushes: int
    edges: int
    residual: float
    node_bound: float
    l1_bound: float


def _clean(r: np.ndarray) -> np.ndarray:
    """float64 with negative or NaN entries 0."""
    r = np.asarray(r, dtype=np.float64)
    return np.where(np.isnan(r) | (r < 0), 0.0, r)


def _gather(indptr: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Positions of the CSR entries of ``rows`` (concatenated) and each entry's row position."""
    starts = indptr[rows].astype(np.int64)
    lens = indptr[rows + 1].astype(np.int64) - starts
    total = int(lens.sum())
    owner = np.repeat(np.arange(len(rows)), lens)
    offsets = np.cumsum(lens) - lens
    pos = np.arange(total, dtype=np.int64) - np.repeat(offsets - starts, lens)
    return pos, owner


class PushPPR:
    """Forward push over a :class:`PPRKernel`'s operator (no copy of the graph).

    ``run(reset, damping, r_max)`` pushes a whole reset; ``run_split(reset, passage_nodes, ...)``
    answers HippoRAG 2's reset by parts and returns passage scores. ``last_stats`` holds the
    :class:`PushStats` of the last call's pushes."""

    def __init__(self, kernel: PPRKernel):
        self.kernel = kernel
        self.n = kernel.n
        S = kernel.S
        self.indptr, self.indices, self.data = S.indptr, S.indices, S.data
        self.sqrt_s = kernel.sqrt_strength64
        self.inv_sqrt = kernel.inv_sqrt64
        self.strength = self.sqrt_s * self.sqrt_s
        #: P^2(v, v): the chance that two steps of the walk from v come back to v (the sum of the
        #: squared entries of S's row, since S(v, u)^2 = w(v, u)^2 / (s(v) s(u)))
        sq = np.square(self.data, dtype=np.float64)
        lens = np.diff(self.indptr)
        self.return2 = np.zeros(self.n)
        rows = np.flatnonzero(lens)
        if len(rows):
            self.return2[rows] = np.add.reduceat(sq, self.indptr[rows].astype(np.int64))
        self.last_stats: list[PushStats] = []
        self._uniform: tuple | None = None
        self._thr: tuple[float, np.ndarray] | None = None
        self._pos: np.ndarray | None = None
        self._local = threading.local()
        self._parrays: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        #: the sum over all nodes of ``run_split``'s last unnormalised estimate (its scores x this)
        self.last_sum = 1.0
        self._pos_key: np.ndarray | None = None

    def _threshold(self, r_max: float) -> np.ndarray:
        """r_max x s(v) for every node (kept for the last r_max)."""
        if self._thr is None or self._thr[0] != r_max:
            self._thr = (r_max, r_max * self.strength)
        return self._thr[1]

    @staticmethod
    def _check(damping: float, r_max: float) -> None:
        if not (0.0 < damping < 1.0):
            raise ValueError(f"damping must lie in (0, 1), got {damping!r}")
        if not r_max > 0:
            raise ValueError(f"r_max must be > 0, got {r_max!r}")

    def run(self, reset: np.ndarray, damping: float = 0.5, r_max: float = DEFAULT_R_MAX) -> np.ndarray:
        """Scores for ``reset`` of shape (n,) or (n, b), each column normalised to sum 1 (negative
        or NaN entries count as 0; an all-zero column gives a uniform reset)."""
        self._check(damping, r_max)
        r = np.asarray(reset)
        single = r.ndim == 1
        cols = r[:, None] if single else r
        if cols.shape[0] != self.n:
            raise ValueError(f"reset has {cols.shape[0]} rows, the graph {self.n} nodes")
        out = np.zeros(cols.shape)
        stats = []
        for j in range(cols.shape[1]):
            c = _clean(cols[:, j])
            if not c.sum() > 0:
                c = np.ones(self.n)
            idx = np.flatnonzero(c)
            nodes, vals, st = self.push(idx, c[idx], damping, r_max)
            out[nodes, j] = vals / vals.sum()
            stats.append(st)
        self.last_stats = stats
        return out[:, 0] if single else out

    def passage_ppr(self, passage_nodes: np.ndarray, damping: float) -> tuple[np.ndarray, float]:
        """Unnormalised pi of the reset 1 on every passage node, at the passage nodes, and its
        sum over all nodes (exact kernel, once per graph version and damping): the constant part
        of the passage prior, by linearity."""
        key = (len(passage_nodes), float(damping))
        if self._uniform is None or self._uniform[0] != key:
            r = np.zeros(self.n)
            r[passage_nodes] = 1.0
            x = self.kernel.run(r, damping, 1e-7, 500)
            mass = len(passage_nodes) - damping * float(r[self.kernel.isolated].sum())
            self._uniform = (key, x[passage_nodes] * mass, mass)
        return self._uniform[1], self._uniform[2]

    def run_split(self, reset: np.ndarray, passage_nodes: np.ndarray, damping: float = 0.5,
                  r_max: float = DEFAULT_R_MAX, head: int = DEFAULT_HEAD) -> tuple[np.ndarray, float]:
        """PPR scores of one query's passages (in ``passage_nodes`` order), by parts (linearity).
        With m the mean prior weight over the passages (the reset's entries on passage nodes):

        - seeds (the entries off the passage nodes): pushed as a unit-mass reset;
        - m x (1 on every passage): ``passage_ppr`` (exact, once per graph version);
        - prior - m on the ``head`` passages of largest prior: pushed (signed residuals);
        - prior - m on the other passages (the tail, close to the mean): settled to order zero
          plus its two-step return to itself, alpha (1 + d^2 P^2(v, v)) (prior(v) - m).

        Scores are scaled as the exact kernel's (the whole vector would sum to 1). Returns them
        and the bound factor B: |pi(v) - p(v)| <= B x s(v) for the unnormalised pi of the reset
        scaled to sum 1 (plus the kernel's tolerance on the constant part), with B = damping x
        (r_max x (L1 mass of the pushed parts) + max over tail passages u of |prior(u) - m| / s(u))."""
        self._check(damping, r_max)
        reset = np.asarray(reset)
        if reset.shape != (self.n,):
            raise ValueError(f"reset must have shape ({self.n},), got {reset.shape}")
        # one pass over all nodes (the nonzeros); the rest works on passages and seeds only
        seed_idx = np.flatnonzero(reset)
        seed_idx = seed_idx[self._passage_pos(passage_nodes)[seed_idx] < 0]
        seed_val = _clean(reset[seed_idx])
        prior = _clean(reset[passage_nodes])
        total = float(seed_val.sum() + prior.sum())
        if not total > 0:
            return self.run(reset, damping, r_max)[passage_nodes], damping * r_max
        alpha = 1.0 - damping
        m = float(prior.mean())
        dev = prior - m
        top = np.argpartition(-prior, head - 1)[:head] if 0 < head < len(prior) else np.arange(len(prior))
        in_head = np.zeros(len(prior), bool)
        in_head[top] = True
        uniform, uniform_sum = self.passage_ppr(passage_nodes, damping)
        tail_dev = np.where(in_head, 0.0, dev)
        ret2, s = self._passage_arrays(passage_nodes)
        out = m * uniform + alpha * tail_dev * (1.0 + damping * damping * ret2)
        out_sum = m * uniform_sum + alpha * float(tail_dev.sum())   # (the return term stays inside pi's sum)
        pushed = 0.0
        stats = []
        for idx, val in ((seed_idx, seed_val), (passage_nodes[top], dev[top])):
            mass = float(np.abs(val).sum())
            if mass > 0:
                nodes, est, st = self.push(idx, val, damping, r_max)
                out_sum += float(est.sum())
                hit = self._passage_pos(passage_nodes)[nodes]
                ok = hit >= 0
                out[hit[ok]] += est[ok]
                pushed += mass
                stats.append(st)
        self.last_stats = stats
        self.last_sum = out_sum / total
        ratio = np.where(s > 0, np.abs(tail_dev) / np.where(s > 0, s, 1.0), 0.0)
        bound = damping * (r_max * pushed + float(ratio.max(initial=0.0))) / total
        return out / out_sum, bound

    def _passage_arrays(self, passage_nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """P^2(v, v) and s(v) at the passage nodes, kept for the last passage set."""
        if self._parrays is None or self._parrays[0] is not passage_nodes:
            self._parrays = (passage_nodes, self.return2[passage_nodes], self.strength[passage_nodes])
        return self._parrays[1], self._parrays[2]

    def _passage_pos(self, passage_nodes: np.ndarray) -> np.ndarray:
        """node -> position in ``passage_nodes`` (-1 elsewhere), kept for the last passage set."""
        if self._pos is None or self._pos_key is not passage_nodes:
            pos = np.full(self.n, -1, np.int64)
            pos[passage_nodes] = np.arange(len(passage_nodes))
            self._pos, self._pos_key = pos, passage_nodes
        return self._pos

    def _scratch(self) -> tuple[np.ndarray, np.ndarray]:
        """This thread's two zeroed work vectors over the nodes (kept between pushes: a fresh pair
        per push cost a page fault per touched page, most of a push's time on a large graph)."""
        local = self._local
        if getattr(local, "pr", None) is None:
            local.pr = (np.zeros(self.n), np.zeros(self.n))
        return local.pr

    def push(self, idx: np.ndarray, val: np.ndarray, damping: float, r_max: float
             ) -> tuple[np.ndarray, np.ndarray, PushStats]:
        """Push the residual ``val`` at nodes ``idx`` (distinct; signed values allowed).
        Returns the nodes touched, the estimate p_hat there (zero elsewhere) and the stats:
        |pi(v) - p_hat(v)| <= damping r_max s(v) x (L1 mass of val)."""
        alpha = 1.0 - damping
        mass = float(np.abs(val).sum())
        if not mass > 0:
            return np.zeros(0, np.int64), np.zeros(0), PushStats(0, 0, 0, 0.0, damping * r_max, 0.0)
        p, r = self._scratch()        # all zero; the entries touched are zeroed again on return
        try:
            idx = np.asarray(idx, dtype=np.int64)
            r[idx] = np.asarray(val, dtype=np.float64) / mass
            thr = self._threshold(r_max)
            front = idx[(np.abs(r[idx]) >= thr[idx]) & (r[idx] != 0)]
            seen = [idx]
            rounds = pushes = edges = 0
            sort_limit = max(1, self.n // _SORT_LIMIT_SHARE)
            while len(front):
                rounds += 1
                pushes += len(front)
                q = r[front]
                r[front] = 0.0
                p[front] += alpha * q
                pos, owner = _gather(self.indptr, front)
                edges += len(pos)
                if not len(pos):           # isolated nodes: their damping share leaves the walk
                    break
                nbr = self.indices[pos]
                # damping q(u) w(u,v)/s(u) with w(u,v) = S(u,v) sqrt(s(u) s(v))
                w = self.data[pos] * (damping * q * self.inv_sqrt[front])[owner]
                if len(pos) > sort_limit:
                    add = np.bincount(nbr, weights=w, minlength=self.n)
                    touched = np.flatnonzero(add)
                    r[touched] += add[touched] * self.sqrt_s[touched]
                else:
                    touched, inv = np.unique(nbr, return_inverse=True)
                    r[touched] += np.bincount(inv, weights=w, minlength=len(touched)) * self.sqrt_s[touched]
                seen.append(touched)
                front = touched[np.abs(r[touched]) >= thr[touched]]
            nodes = np.unique(np.concatenate(seen))
            residual = float(np.abs(r[nodes]).sum())
            est = (p[nodes] + alpha * r[nodes]) * mass
            p[nodes] = 0.0
            r[nodes] = 0.0
        except BaseException:
            self._local.pr = None   # (possibly dirty: the next push starts afresh)
            raise
        return nodes, est, PushStats(rounds, pushes, edges, residual, damping * r_max, damping * residual)


def combine(parts: list[np.ndarray], weights: list[float]) -> np.ndarray:
    """sum_i weights[i] x parts[i]: PPR of sum_i weights[i] x reset_i from the PPR of each
    (unit-mass) part, by linearity."""
    if len(parts) != len(weights) or not parts:
        raise ValueError("combine needs as many weights as parts, at least one")
    out = np.zeros_like(parts[0], dtype=np.float64)
    for part, w in zip(parts, weights, strict=True):
        out += w * part
    return out
