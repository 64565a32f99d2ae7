"""``kb_vector``: the passages by cosine with the query, those at least ``score_threshold``."""
from __future__ import annotations

import numpy as np

from hippo_engine.config import QueryParam
from hippo_engine.graphrag.engine_search import passage_cosines
from hippo_engine.kb.base import KBSearch, Ranked, by_score


def vector_rank(eng, q_pass: np.ndarray, threshold: float) -> Ranked:
    """Passage nodes by cosine with ``q_pass``, those at least ``threshold``."""
    cos = passage_cosines(eng, q_pass)
    nodes = np.flatnonzero(cos >= threshold)
    return by_score(nodes, cos[nodes])


class KBVectorSearch(KBSearch):
    """``kb_vector``: vector search over the passages."""

    def rank(self, eng, q_ent: np.ndarray, q_pass: np.ndarray, threshold: float, param: QueryParam) -> Ranked:
        return vector_rank(eng, q_pass, threshold)
