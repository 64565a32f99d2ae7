"""``kb_hybrid``: ``kb_vector`` and ``kb_graph`` merged, de-duplicated and re-scored.

Both rankings are computed on the same query vectors (in one process, one after the other: the
design runs them in parallel against the database) and fused by reciprocal rank:
``score(p) = sum over the rankings holding p of 1 / (kb_rrf_k + rank)`` (rank from 1), so a passage
both find comes first. Ties: the better vector rank, then lower node.
"""
from __future__ import annotations

import numpy as np

from hippo_engine.config import QueryParam
from hippo_engine.kb.base import KBSearch, Ranked
from hippo_engine.kb.graph import graph_rank
from hippo_engine.kb.vector import vector_rank


def fuse(rankings: list[Ranked], k: int) -> Ranked:
    """Reciprocal-rank fusion of ``rankings`` (the first one breaks ties)."""
    score: dict[int, float] = {}
    first: dict[int, int] = {}
    for r in rankings:
        for rank, n in enumerate(r.nodes, start=1):
            score[n] = score.get(n, 0.0) + 1.0 / (k + rank)
    for rank, n in enumerate(rankings[0].nodes if rankings else []):
        first[n] = rank
    order = sorted(score, key=lambda n: (-score[n], first.get(n, len(first)), n))
    return Ranked(order, [score[n] for n in order])


class KBHybridSearch(KBSearch):
    """``kb_hybrid``: vector and graph search fused (the design's recommended mode)."""

    def rank(self, eng, q_ent: np.ndarray, q_pass: np.ndarray, threshold: float, param: QueryParam) -> Ranked:
        cfg = self.config
        vec = vector_rank(eng, q_pass, threshold)
        graph = graph_rank(eng, q_ent, q_pass, threshold, cfg.kb_seed_entities, cfg.kb_hops,
                           self.graph_queries())
        out = fuse([vec, graph], cfg.kb_rrf_k)
        out.seeds = graph.seeds
        return out
