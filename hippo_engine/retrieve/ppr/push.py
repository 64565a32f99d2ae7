"""Approximate Personalized PageRank by forward push (Andersen, Chung and Lang 2006), batched
over a frontier, on the same operator as :class:`~hippo_engine.retrieve.ppr.kernel.PPRKernel`.

What it computes. With alpha = 1 - damping, P = W D^-1 (the walk of the kernel) and r the
reset normalised to sum 1, the PPR vector is pi = alpha sum_k (damping P)^k r (the kernel's
answer, up to the rescaling of mass lost at isolated nodes). Push keeps an estimate p and a
residual q with the invariant pi = p + PPR(q): pushing node u moves alpha q(u) into p(u) and
spreads damping q(u) over u's neighbours in proportion to the edge weights. Every node whose
residual is at least ``r_max x s(u)`` (s: the node's strength, its summed edge weight) is
pushed; all such nodes of a round are pushed at once (one gather over their CSR rows, one
scattered accumulation), and only the nodes a round touched can join the next frontier, so a
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
unnormalised pi of a reset summing to 1.

HippoRAG 2's reset. PPR is linear in the reset, so :meth:`PushPPR.run_parts` answers a query's
entity seeds and its passage prior (a weight on every passage) apart and adds them: the seeds
by push, the prior's mean by one exact solve per passage set (``push_prior``), the prior's
largest deviations from the mean by push and the rest settled in closed form, then the walk's
next two steps from everything left at the 64 passages of largest estimate (``push_refine``: their
bound shrinks by damping^2, which is what makes the top 10 agree with the exact kernel); it reads
no array over all graph nodes, only the passages' and what the pushes touch
(:meth:`PushPPR.run_split` takes the whole reset vector instead and costs one more scan of it).
"""
from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np

from hippo_engine.retrieve.ppr.kernel import PPRKernel
from hippo_engine.retrieve.ppr.push_ann import correct_tail, own_bound
from hippo_engine.retrieve.ppr.push_ann import tail_ratio as ann_tail_ratio
from hippo_engine.retrieve.ppr.push_prior import PassageSet, top_entries
from hippo_engine.retrieve.ppr.push_refine import LocalSteps, distinct, gather

#: default residual threshold per unit of strength (measured, see reproduce/results/ppr_scale)
DEFAULT_R_MAX = 1e-5
#: default number of prior passages pushed by ``run_split`` (the rest settled to order zero)
DEFAULT_HEAD = 100
#: default number of candidate passages whose estimate gets the walk's next steps (``push_refine``)
DEFAULT_REFINE = 64
#: default number of those steps
DEFAULT_DEPTH = 2
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


class PushPPR:
    """Forward push over a :class:`PPRKernel`'s operator (no copy of the graph).

    ``run(reset, damping, r_max)`` pushes a whole reset; ``run_parts(seeds, weights, prior,
    passage_nodes, ...)`` answers HippoRAG 2's reset by parts and returns passage scores
    (``run_split`` the same from the whole reset vector). ``last_stats`` holds the
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
        self._local = threading.local()
        self._pset: PassageSet | None = None
        #: the sum over all nodes of ``run_parts``'s last unnormalised estimate (its scores x this)
        self.last_sum = 1.0
        self.last_candidate_bound = 0.0
        self._steps = LocalSteps(self.indptr, self.indices, self.data, self.sqrt_s, self.inv_sqrt)

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
        sum over all nodes (exact kernel, once per passage set and damping): the constant part
        of the passage prior, by linearity."""
        ps = self._passages(passage_nodes, damping)
        return ps.uniform, ps.uniform_sum

    def _passages(self, passage_nodes: np.ndarray, damping: float) -> PassageSet:
        """The per-passage-set arrays (kept for the last set and damping: one exact solve)."""
        ps = self._pset
        if ps is None or ps.damping != damping or not (ps.nodes is passage_nodes
                                                        or np.array_equal(ps.nodes, passage_nodes)):
            ps = self._pset = PassageSet.build(self.kernel, self.return2, np.asarray(passage_nodes), damping)
        return ps

    def run_split(self, reset: np.ndarray, passage_nodes: np.ndarray, damping: float = 0.5,
                  r_max: float = DEFAULT_R_MAX, head: int = DEFAULT_HEAD, refine: int = DEFAULT_REFINE,
                  depth: int = DEFAULT_DEPTH, exact_prior=None) -> tuple[np.ndarray, float]:
        """:meth:`run_parts` of a whole reset vector of shape (n,): its entries off the passage
        nodes are the seeds, those on them the prior (one scan of the nonzeros, as a mask)."""
        self._check(damping, r_max)
        reset = np.asarray(reset)
        if reset.shape != (self.n,):
            raise ValueError(f"reset must have shape ({self.n},), got {reset.shape}")
        ps = self._passages(passage_nodes, damping)
        mask = self._mask()
        if ps.span is not None:
            lo, hi = ps.span
            seed_idx = np.concatenate([np.flatnonzero(np.not_equal(reset[:lo], 0, out=mask[:lo])),
                                       hi + np.flatnonzero(np.not_equal(reset[hi:], 0, out=mask[hi:]))])
            prior = reset[lo:hi]
        else:
            seed_idx = np.flatnonzero(np.not_equal(reset, 0, out=mask))
            seed_idx = seed_idx[ps.pos[seed_idx] < 0]
            prior = reset[ps.nodes]
        return self.run_parts(seed_idx, reset[seed_idx], prior, passage_nodes, damping, r_max, head, refine, depth,
                              exact_prior)

    def run_parts(self, seed_idx: np.ndarray, seed_val: np.ndarray, prior: np.ndarray, passage_nodes: np.ndarray,
                  damping: float = 0.5, r_max: float = DEFAULT_R_MAX, head: int = DEFAULT_HEAD,
                  refine: int = DEFAULT_REFINE, depth: int = DEFAULT_DEPTH, exact_prior=None
                  ) -> tuple[np.ndarray, float]:
        """PPR scores of one query's passages (in ``passage_nodes`` order) for the reset made of
        ``seed_val`` at nodes ``seed_idx`` (distinct, off the passages: the entity seeds) plus
        ``prior`` on the passages (one weight per passage), by parts (linearity). With m the mean
        prior weight:

        - seeds: pushed as a unit-mass reset;
        - m x (1 on every passage): ``passage_ppr`` (exact, once per passage set);
        - prior - m on the ``head`` passages of largest prior: pushed (signed residuals);
        - prior - m on the other passages (the tail, close to the mean): settled to order zero
          plus its two-step return to itself, alpha (1 + d^2 P^2(v, v)) (prior(v) - m);
        - at the ``refine`` passages of largest estimate: the walk's next ``depth`` steps from the
          whole residual left (``push_refine``), which divides their bound by damping^depth
          (``last_candidate_bound``).

        Nothing here reads all graph nodes: the passages' arrays and what the pushes touch.
        Scores are scaled as the exact kernel's (the whole vector would sum to 1). Returns them
        and the bound factor B: |pi(v) - p(v)| <= B x s(v) for the unnormalised pi of the reset
        scaled to sum 1 (plus the kernel's tolerance on the constant part), with B = damping x
        (r_max x (L1 mass of the pushed parts) + max over tail passages u of |prior(u) - m| / s(u)).

        ``exact_prior`` (an :class:`.ann_prior.AnnPrior`): ``prior`` is exact only at its known rows
        and a fill elsewhere; the tail passages that could reach the top get their exact prior
        (:func:`.push_ann.correct_tail`, also in the refinement) and the bound counts the others."""
        self._check(damping, r_max)
        ps = self._passages(passage_nodes, damping)
        seed_idx = np.asarray(seed_idx, dtype=np.int64)
        seed_val = _clean(np.asarray(seed_val, dtype=np.float64))
        prior = np.asarray(prior, dtype=np.float64)
        if not prior.min(initial=0.0) >= 0:     # (NaN or negative entries count as 0)
            prior = np.fmax(prior, 0.0)
        if prior.shape != ps.nodes.shape or seed_idx.shape != seed_val.shape:
            raise ValueError(f"prior must have one weight per passage ({len(ps.nodes)}), got {prior.shape}; "
                             f"seeds {seed_idx.shape} nodes for {seed_val.shape} weights")
        if len(seed_idx) and (ps.pos[seed_idx] >= 0).any():
            raise ValueError("seed nodes must lie off the passage nodes (their weight belongs in prior)")
        prior_sum = float(prior.sum())
        total = float(seed_val.sum()) + prior_sum
        if not total > 0:
            return self.run(np.zeros(self.n), damping, r_max)[ps.nodes], damping * r_max
        alpha = 1.0 - damping
        m = prior_sum / len(prior)
        top = top_entries(prior, head)
        dev_top = prior[top] - m
        # m x uniform + c1 x (prior - m) off the head = c1 x prior + m x (uniform - c1), head fixed after
        tmp = ps.scratch()
        out = ps.uniform_less_c1 * m
        out += np.multiply(ps.c1, prior, out=tmp)
        out[top] -= ps.c1[top] * dev_top
        out_sum = m * ps.uniform_sum - alpha * float(dev_top.sum())   # (tail deviations sum to -head's)
        pushed = 0.0
        stats = []
        left = []                      # (nodes, residual) of each push
        for idx, val in ((seed_idx, seed_val), (ps.nodes[top], dev_top)):
            mass = float(np.abs(val).sum())
            if mass > 0:
                nodes, est, res, st = self.push_residual(idx, val, damping, r_max)
                out_sum += float(est.sum())
                hit = ps.pos[nodes]
                ok = hit >= 0
                out[hit[ok]] += est[ok]
                pushed += mass
                stats.append(st)
                left.append((nodes, res))
        known = None
        if exact_prior is not None:     # the tail passages that could reach the top: their own prior
            prior, known = correct_tail(out, prior, ps, exact_prior, refine)
        out_sum += self._refine(out, prior, m, top, dev_top, left, ps, damping, refine, depth,
                                None if known is None else (exact_prior, known))
        self.last_stats = stats
        self.last_sum = out_sum / total
        tail = ps.tail_ratio(prior, m, top, tmp) if known is None else \
            ann_tail_ratio(ps, prior, m, top, known, exact_prior.spread, exact_prior.fill_weight)
        rho = (r_max * pushed + tail) / total
        bound = damping * rho
        if known is not None:           # the own prior of the passages left at the fill
            bound += own_bound(ps, known, exact_prior.spread) / total
        #: the bound factor at the ``refine`` candidate passages (their next ``depth`` steps added)
        self.last_candidate_bound = damping ** (max(0, depth) + 1) * rho if refine > 0 else bound
        out /= out_sum
        return out, bound

    def _refine(self, out: np.ndarray, prior: np.ndarray, m: float, top: np.ndarray, dev_top: np.ndarray,
                left: list, ps: PassageSet, damping: float, refine: int, depth: int, exact=None) -> float:
        """Add the walk's next ``depth`` steps from the whole residual (the pushes' and the settled
        tail's) at the ``refine`` passages of largest estimate (``push_refine``); returns the mass added.
        ``exact``: (AnnPrior, mask of exact passages): the others' tail values are read from it."""
        if refine <= 0 or depth <= 0:
            return 0.0
        alpha = 1.0 - damping
        cand = top_entries(out, refine)
        p, g, mark = self._scratch()
        # q = pushed residuals + (prior - m) on every passage, less the head's (pushed, not settled)
        head_nodes = ps.nodes[top]
        try:
            for nodes, res in left:
                p[nodes] += res
            p[head_nodes] -= dev_top

            def q_of(x: np.ndarray) -> np.ndarray:
                pos = ps.pos[x]
                on = pos >= 0
                q = p[x]
                q[on] += prior[pos[on]] - m
                if exact is not None:
                    q[on] += exact[0].delta(pos[on], exact[1])
                return q

            steps = self._steps.terms(ps.nodes[cand], q_of, damping, depth, mark, g)
        finally:
            for nodes, _ in left:
                p[nodes] = 0.0
            p[head_nodes] = 0.0
        # the tail's settled value already holds its two-step return to itself: taken out here
        tail = prior[cand] - m
        tail[np.isin(cand, top)] = 0.0
        corr = alpha * steps - (ps.c1[cand] - alpha) * tail
        out[cand] += corr
        return float(corr.sum())

    def _scratch(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """This thread's work vectors over the nodes: estimate and residual (zero; kept between
        pushes: a fresh pair per push cost a page fault per touched page, most of a push's time on
        a large graph) and a mark array for ``push_refine.distinct`` (any content)."""
        local = self._local
        if getattr(local, "pr", None) is None:
            local.pr = (np.zeros(self.n), np.zeros(self.n), np.zeros(self.n, np.int32))
        return local.pr

    def _mask(self) -> np.ndarray:
        """This thread's boolean work vector over the nodes (any content)."""
        mask = getattr(self._local, "mask", None)
        if mask is None:
            mask = self._local.mask = np.empty(self.n, bool)
        return mask

    def push(self, idx: np.ndarray, val: np.ndarray, damping: float, r_max: float
             ) -> tuple[np.ndarray, np.ndarray, PushStats]:
        """Push the residual ``val`` at nodes ``idx`` (distinct; signed values allowed).
        Returns the nodes touched, the estimate p_hat there (zero elsewhere) and the stats:
        |pi(v) - p_hat(v)| <= damping r_max s(v) x (L1 mass of val)."""
        nodes, est, _, stats = self.push_residual(idx, val, damping, r_max)
        return nodes, est, stats

    def push_residual(self, idx: np.ndarray, val: np.ndarray, damping: float, r_max: float
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray, PushStats]:
        """:meth:`push`, also returning the residual left at the nodes touched (in val's units)."""
        alpha = 1.0 - damping
        mass = float(np.abs(val).sum())
        if not mass > 0:
            return np.zeros(0, np.int64), np.zeros(0), np.zeros(0), PushStats(0, 0, 0, 0.0, damping * r_max, 0.0)
        p, r, mark = self._scratch()   # p, r all zero; the entries touched are zeroed again on return
        try:
            idx = np.asarray(idx, dtype=np.int64)
            r[idx] = np.asarray(val, dtype=np.float64) / mass
            # (the threshold r_max x s(v) is formed for the nodes at hand: a vector of it over all
            # nodes cost a pass over the graph whenever r_max changed)
            front = idx[(np.abs(r[idx]) >= r_max * self.strength[idx]) & (r[idx] != 0)]
            seen = [idx]
            rounds = pushes = edges = 0
            sort_limit = max(1, self.n // _SORT_LIMIT_SHARE)
            while len(front):
                rounds += 1
                pushes += len(front)
                q = r[front]
                r[front] = 0.0
                p[front] += alpha * q
                pos, owner = gather(self.indptr, front)
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
                    w *= self.sqrt_s[nbr]
                    np.add.at(r, nbr, w)
                    touched = distinct(nbr, mark)
                seen.append(touched)
                front = touched[np.abs(r[touched]) >= r_max * self.strength[touched]]
            nodes = distinct(np.concatenate(seen), mark)
            residual = float(np.abs(r[nodes]).sum())
            est = (p[nodes] + alpha * r[nodes]) * mass
            res = r[nodes] * mass
            p[nodes] = 0.0
            r[nodes] = 0.0
        except BaseException:
            self._local.pr = None   # (possibly dirty: the next push starts afresh)
            raise
        return nodes, est, res, PushStats(rounds, pushes, edges, residual, damping * r_max, damping * residual)


def combine(parts: list[np.ndarray], weights: list[float]) -> np.ndarray:
    """sum_i weights[i] x parts[i]: PPR of sum_i weights[i] x reset_i from the PPR of each
    (unit-mass) part, by linearity."""
    if len(parts) != len(weights) or not parts:
        raise ValueError("combine needs as many weights as parts, at least one")
    out = np.zeros_like(parts[0], dtype=np.float64)
    for part, w in zip(parts, weights, strict=True):
        out += w * part
    return out
