"""The ``ppr-scale`` variant with the passage prior from an index (``retrieve/ppr/ann_prior.py``): what the
retriever's default path runs at scale on PostgreSQL (``dense_prior="auto"``), on the synthetic graphs.

The synthetic queries have dense scores but no vectors, so each query's scores become a one-column
"matrix" (a passage's vector is its score, the query vector is 1: a dot product gives the score back)
and the stand-in for the HNSW index returns the passages of best and of lowest score exactly (an index
that misses nothing; what HNSW misses is measured by ``pg-scale`` on real vectors). The timed part is
the PPR call of :func:`hippo_engine.retrieve.ppr.push_ann.run_seed_table` for one query (the prior's
weights and ``PushPPR.run_parts`` with the prior's corrections), the retriever's ``ppr`` part; building
the prior from the index is its ``scoring`` part, measured by ``pg-scale``.
"""
from __future__ import annotations

import numpy as np

from hippo_engine.retrieve.ppr.ann_prior import AnnDense, AnnPrior


class ScoreIndex:
    """The passages of highest score for a one-number query ``q`` (score x q), exactly: a stand-in
    for the passage store's HNSW index (``nearest_ids`` / ``rows_of`` of a lazy PostgreSQL store)."""

    def __init__(self, scores: np.ndarray):
        self.scores = scores

    def nearest_ids(self, q: np.ndarray, k: int) -> list[int]:
        s = self.scores * float(np.asarray(q).ravel()[0])
        k = min(int(k), len(s))
        return np.argpartition(-s, k - 1)[:k].tolist() if k > 0 else []

    def rows_of(self, ids) -> np.ndarray:
        return np.asarray(ids, np.int64)


def index_prior(prior: np.ndarray, weight: float, head: int, want: int) -> AnnPrior | None:
    """The :class:`AnnPrior` of a query whose passage prior is ``prior`` (``weight x min-max(score)``),
    built as the retriever builds it from the index (its ``head`` best and lowest passages exact, the
    rest at the mean-keeping fill); None where the index cannot stand in for the scan."""
    mat = np.asarray(prior, np.float32)[:, None]
    got = AnnDense(ScoreIndex(mat[:, 0]), mat, weight).column(np.ones(1, np.float32), head, want)
    return None if got is None else got[1]
