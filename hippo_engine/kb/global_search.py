"""``kb_global``: the communities nearest the query, then their representative documents.

The ``kb_communities`` communities (any level) whose report vectors are nearest the query's
passage vector, with cosine at least ``score_threshold``, in that order; for each, its passages
(most members mentioned first, as stored with the community), de-duplicated. A passage is scored
with its community's cosine. Needs communities (built without LLM reports when missing, see
:meth:`hippo_engine.hirag.component.HiRAG.communities`).
"""
from __future__ import annotations

import numpy as np

from hippo_engine.config import QueryParam
from hippo_engine.graphrag.engine_search import community_passages
from hippo_engine.kb.base import KBSearch, Ranked
from hippo_engine.retrieve.scoring import top_k


def global_rank(eng, q_pass: np.ndarray, threshold: float, keep: int) -> Ranked:
    """The ``kb_global`` ranking of one query (see the module docs)."""
    if eng.cset is None or not eng.communities:
        return Ranked([], [])
    sims = eng.cset.matrix() @ q_pass
    nodes, scores, seen = [], [], set()
    comms = [int(ci) for ci in top_k(sims, keep) if sims[ci] >= threshold]
    for ci in comms:
        for p in community_passages(eng, ci):
            if p not in seen:
                seen.add(p)
                nodes.append(p)
                scores.append(float(sims[ci]))
    return Ranked(nodes, scores)


class KBGlobalSearch(KBSearch):
    """``kb_global``: relevant communities, then their documents."""


    def rank(self, eng, q_ent: np.ndarray, q_pass: np.ndarray, threshold: float, param: QueryParam) -> Ranked:
        return global_rank(eng, q_pass, threshold, self.config.kb_communities)
