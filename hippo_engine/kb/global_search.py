"""``kb_global``: the communities nearest the query, then their representative documents.

The ``kb_communities`` communities (any level) whose report vectors are nearest the query's
passage vector, with cosine at least ``score_threshold``, in that order; for each, its passages
(most members mentioned first, as stored with the community), de-duplicated. A passage is scored
with its community's cosine. Needs communities (built without LLM reports when missing, see
:meth:`hippo_engine.hirag.component.HiRAG.communities`).

On a store that searches in its database (FalkorDB) the candidates come from the vector index on the
community summaries, :data:`CANDIDATES` times as many as kept; they are scored with the cosines of
the in-process mode (the same product over the report vectors), so the kept communities and their
scores are the same. A candidate list that misses one the exact order keeps (an approximate index
can) is reported in the log and the exact order used.
"""
from __future__ import annotations

import logging

import numpy as np

from hippo_engine.config import QueryParam
from hippo_engine.graphrag.engine_search import community_passages
from hippo_engine.kb.base import KBSearch, Ranked
from hippo_engine.retrieve.scoring import top_k
from hippo_engine.store.base import GraphQueries

logger = logging.getLogger(__name__)

#: communities asked of the database's vector index per community kept
CANDIDATES = 4


def nearest_communities(eng, sims: np.ndarray, q_pass: np.ndarray, keep: int, threshold: float,
                        db: GraphQueries | None) -> list[int]:
    """Of the ``keep`` communities (positions) with the highest ``sims`` (ties: lower position), those
    at least ``threshold``, best first; ``db``: among the candidates of the database's vector index."""
    exact = [ci for ci in top_k(sims, keep).tolist() if sims[ci] >= threshold]
    if db is None:
        return exact
    pos = {c.id: ci for ci, c in enumerate(eng.communities)}
    cand = np.array(sorted({pos[c] for c in db.nearest_communities(q_pass, CANDIDATES * keep) if c in pos}),
                    dtype=np.int64)
    chosen = [ci for ci in cand[top_k(sims[cand], keep)].tolist() if sims[ci] >= threshold] if len(cand) else []
    if chosen != exact:
        logger.info("kb_global: the vector index of the community summaries missed %d of the %d nearest "
                    "communities; the exact order is used", len(set(exact) - set(chosen)), len(exact))
        return exact
    return chosen


def global_rank(eng, q_pass: np.ndarray, threshold: float, keep: int, db: GraphQueries | None = None) -> Ranked:
    """The ``kb_global`` ranking of one query (see the module docs)."""
    if eng.cset is None or not eng.communities:
        return Ranked([], [])
    sims = eng.cset.matrix() @ q_pass
    nodes, scores, seen = [], [], set()
    for ci in nearest_communities(eng, sims, q_pass, keep, threshold, db):
        for p in community_passages(eng, ci):
            if p not in seen:
                seen.add(p)
                nodes.append(p)
                scores.append(float(sims[ci]))
    return Ranked(nodes, scores)


class KBGlobalSearch(KBSearch):
    """``kb_global``: relevant communities, then their documents."""

    def rank(self, eng, q_ent: np.ndarray, q_pass: np.ndarray, threshold: float, param: QueryParam) -> Ranked:
        return global_rank(eng, q_pass, threshold, self.config.kb_communities, self.graph_queries())
