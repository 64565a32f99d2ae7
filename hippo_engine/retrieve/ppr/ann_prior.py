"""The passage prior of HippoRAG 2's reset from an ANN index instead of a scan of every passage.

The reset puts ``w x min-max(dense score)`` on every passage (``seeding.passage_seeds``). At scale the
scan that scores every passage for it costs more than the walk itself (at 500k passages 223 of 253 ms
per query, the walk by forward push 68 ms: ``reproduce/results/pg_scale``). What the push needs of
the prior is its mean, its largest entries (pushed) and, at the few passages that can reach the top of
the ranking, their own value (:mod:`.push`). So, per query:

- **head**: the ``head`` best passages from the passage store's HNSW index, rescored exactly from the
  passage matrix (the same float32 dot loop as the scan, so they have the scan's scores);
- **extremes**: the largest score is the head's first; the smallest from the index's ``head`` best
  candidates for ``-q`` (the passages least like the query), rescored the same way. HNSW is weak on
  such an anti-query: at 500k passages it found the true minimum for 2 queries in 12 with 8
  candidates, 4 with 400, 8 with 1000, and a minimum too high shrinks the prior's mass (13-18% there);
  top-10 recall against exact PPR went 0.962 -> 0.973 -> 0.978 (``reproduce/results/pg_scale``);
- **mean**: ``q . mean(passage vectors)`` (the mean vector is computed once per retriever version);
- **fill**: every other passage gets the score that keeps the mean exact, so the prior's total mass
  and its mean are the exact ones and only how the tail's mass is spread is unknown.

:class:`AnnPrior` then answers the push's two questions about the tail: the exact prior of given
passages (:meth:`AnnPrior.delta`: its difference from the fill) and how far a tail passage's own
prior can lie above the fill (:attr:`AnnPrior.gain_cap`: no passage outside the head scores above
the head's last). The push corrects every passage that could reach the top with that gain and bounds
the rest (``push.PushPPR.run_parts``, ``exact_prior``).

The push's bound holds for the head and extremes found. Where the index misses a true head passage
(HNSW recall is below 1) that passage is a tail passage scoring above ``cap``, and where it misses
the true minimum every passage's prior is off; the bound does not count either, the agreement with
exact PPR in ``reproduce/results/pg_scale`` measures them.
"""
from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

#: fewest passages outside the head for the index to stand in for the scan
MIN_TAIL = 8


def _scores(mat: np.ndarray, rows: np.ndarray, q32: np.ndarray) -> np.ndarray:
    """float32 scores of ``rows`` as :func:`.scoring.dense_column` computes them (the same dot loop)."""
    if len(rows) == 0:
        return np.zeros(0, np.float32)
    return np.einsum("ij,j->i", np.asarray(mat[rows], dtype=np.float32), q32)


@dataclass
class AnnPrior:
    """One query's dense scores known at a few passage rows (``known``), the rest set to ``fill``.
    ``lo``/``hi``: the min-max of the prior; ``cap``: the largest score a row outside the head can
    have; ``weight``: ``passage_node_weight``; ``want``: the ranks the caller reads (top-k)."""

    mat: np.ndarray
    q32: np.ndarray
    known: np.ndarray
    fill: float
    lo: float
    hi: float
    cap: float
    weight: float
    want: int
    #: the known rows' scores (float32), as the scan gives them
    known_scores: np.ndarray | None = None

    @property
    def scale(self) -> float:
        """Prior weight per unit of dense score (``w / (hi - lo)``; 0 for a constant prior)."""
        return self.weight / (self.hi - self.lo) if self.hi > self.lo else 0.0

    @property
    def gain_cap(self) -> float:
        """The most a tail passage's prior weight can lie above the fill's."""
        return max(0.0, (self.cap - self.fill) * self.scale)

    @property
    def spread(self) -> float:
        """The most a tail passage's prior weight can differ from the fill's, either way."""
        return max(self.gain_cap, (self.fill - self.lo) * self.scale)

    @property
    def fill_weight(self) -> float:
        """The prior weight of a passage at the fill (``weight x min-max(fill)``)."""
        rng = self.hi - self.lo
        return self.weight * ((self.fill - self.lo) / rng if rng > 0 else 1.0)

    def weights(self, n: int) -> np.ndarray:
        """The prior over the ``n`` passages, ``weight x min-max(score)`` with the fill off the known
        rows: what ``seeding.passage_seeds`` gives for the query's column, without a pass over it."""
        rng = self.hi - self.lo
        out = np.full(n, self.fill_weight)
        s = (self.known_scores if self.known_scores is not None else
             _scores(self.mat, self.known, self.q32)).astype(np.float64)
        out[self.known] = self.weight * ((s - self.lo) / rng if rng > 0 else np.ones(len(s)))
        return out

    def known_mask(self, n: int) -> np.ndarray:
        """Boolean mask of the rows whose score is exact."""
        mask = np.zeros(n, bool)
        mask[self.known] = True
        return mask

    def delta(self, rows: np.ndarray, known: np.ndarray | None = None) -> np.ndarray:
        """Exact prior weight minus the fill's at passage ``rows`` (0 where ``known``, a mask)."""
        rows = np.asarray(rows, np.int64)
        out = np.zeros(len(rows))
        todo = np.arange(len(rows)) if known is None else np.flatnonzero(~known[rows])
        if len(todo):
            out[todo] = (_scores(self.mat, rows[todo], self.q32).astype(np.float64) - self.fill) * self.scale
        return out


class AnnDense:
    """Dense passage scores of a query from a passage store's ANN search (see the module).
    ``store``: a lazy PostgreSQL store (``nearest_ids``, ``rows_of``); ``mat``: the passage matrix in
    the store's row order."""

    def __init__(self, store, mat: np.ndarray, weight: float):
        self.store, self.mat, self.weight = store, mat, float(weight)
        self._mean: np.ndarray | None = None
        self._lock = threading.Lock()

    @property
    def mean(self) -> np.ndarray:
        """The mean passage vector (float64), computed once."""
        if self._mean is None:
            with self._lock:
                if self._mean is None:
                    acc = np.zeros(self.mat.shape[1])
                    for s in range(0, len(self.mat), 65536):
                        acc += np.asarray(self.mat[s:s + 65536], dtype=np.float64).sum(axis=0)
                    self._mean = acc / max(1, len(self.mat))
        return self._mean

    def _rows(self, q: np.ndarray, k: int) -> np.ndarray:
        ids = self.store.nearest_ids(q, k)
        rows = self.store.rows_of(ids) if ids else np.zeros(0, np.int64)
        return np.asarray(rows, np.int64)[np.asarray(rows) >= 0] if len(rows) else np.zeros(0, np.int64)

    def column(self, q: np.ndarray, head: int, want: int) -> tuple[np.ndarray, AnnPrior] | None:
        """The query's scores over every passage (float32; exact at the known rows, the fill
        elsewhere) and its :class:`AnnPrior`; None where the ANN search cannot stand in for the
        scan (too few passages outside the head, or none found)."""
        n = len(self.mat)
        q32 = np.asarray(q, np.float32).ravel()
        top = self._rows(q32, head)
        if len(top) == 0 or n - len(top) <= MIN_TAIL:
            return None
        low = np.setdiff1d(self._rows(-q32, head), top)
        known = np.concatenate([top, low])
        if n - len(known) < MIN_TAIL:     # (a small store: the scan costs little)
            return None
        s = _scores(self.mat, known, q32)
        cap = float(s[:len(top)].min())
        lo, hi = float(s.min()), float(s.max())
        mean = float(np.dot(self.mean, q32.astype(np.float64)))
        fill = (n * mean - float(s.astype(np.float64).sum())) / (n - len(known))
        fill = float(np.clip(fill, lo, cap))
        col = np.full(n, fill, np.float32)
        col[known] = s
        return col, AnnPrior(self.mat, q32, known, float(np.float32(fill)), lo, hi, cap, self.weight, want, s)

    def block(self, q_pass: np.ndarray, head: int, want: int, scan: Callable[[np.ndarray], np.ndarray]
              ) -> tuple[np.ndarray, list[AnnPrior | None]]:
        """:meth:`column` for each query row of ``q_pass``: (n_passages, b) scores and the priors
        (a query the index cannot serve is scored by ``scan``, its prior None)."""
        cols, priors = [], []
        for q in np.atleast_2d(q_pass):
            got = self.column(q, head, want)
            col, prior = got if got is not None else (scan(q[None, :])[:, 0], None)
            cols.append(col)
            priors.append(prior)
        return np.column_stack(cols), priors
