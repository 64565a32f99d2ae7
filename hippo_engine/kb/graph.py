"""``kb_graph``: seed entities by vector search, an N-hop traversal, the passages that mention the
reached entities.

The ``kb_seed_entities`` entities nearest the query (cosine at least ``score_threshold``) seed a
breadth-first traversal of the entity graph (relations and synonymy edges) of ``kb_hops`` hops
(2 as in the design). Every passage that mentions a reached entity is a candidate, ranked by its
relevance: its cosine with the query (ties: lower node). The seeds' names are the solution's
``seed_entities``. On a store that answers graph questions in its database (FalkorDB) the traversal
and the passages of the reached entities are asked there (:mod:`hippo_engine.store.falkordb.queries`);
the seeds are the in-process entity search's, the candidates and their scores the same.
"""
from __future__ import annotations

import numpy as np

from hippo_engine.config import QueryParam
from hippo_engine.graphrag.engine_search import passage_cosines
from hippo_engine.kb.base import KBSearch, Ranked, by_score
from hippo_engine.store.base import GraphQueries


def reach(eng, seeds: list[int], hops: int) -> dict[int, int]:
    """Entity node -> hops from the nearest seed, for every entity within ``hops`` of ``seeds``."""
    dist = {s: 0 for s in seeds}
    frontier = list(dict.fromkeys(seeds))
    for h in range(1, hops + 1):
        nxt = []
        for e in frontier:
            for n in eng.neighbors[e]:
                if n not in dist:
                    dist[n] = h
                    nxt.append(n)
        frontier = nxt
    return dist


class GraphPassages:
    """The passage ids of the engine's graph (``in``), the passages a database traversal may go through."""

    def __init__(self, eng):
        self.index_of, self.num_entities = eng.graph.index_of, eng.graph.num_entities

    def __contains__(self, pid: object) -> bool:
        return self.index_of.get(pid, -1) >= self.num_entities


def reached_passages(eng, seeds: list[int], hops: int, db: GraphQueries | None = None) -> list[int]:
    """Passage nodes mentioning an entity within ``hops`` of the ``seeds`` (entity nodes), sorted;
    ``db``: traversed in the database (the same edges as the engine's graph), else in process."""
    if db is None:
        return sorted({p for e in reach(eng, seeds, hops) for p in eng.ent_passages[e]})
    passages = GraphPassages(eng)
    reached = db.reach([str(eng.node_ids[e]) for e in seeds], hops, passages)
    found = db.entity_passages(reached)
    return sorted({passages.index_of[p] for ps in found.values() for p in ps if p in passages})


def graph_rank(eng, q_ent: np.ndarray, q_pass: np.ndarray, threshold: float, seeds: int, hops: int,
               db: GraphQueries | None = None) -> Ranked:
    """The ``kb_graph`` ranking of one query (see the module docs); ``db``: traverse in the database."""
    found = [(e, s) for e, s in eng.top_entities(q_ent, seeds) if s >= threshold]
    cands = reached_passages(eng, [e for e, _ in found], hops, db)
    cos = passage_cosines(eng, q_pass)
    r = by_score(cands, cos[cands] if cands else [])
    r.seeds = [(eng.name(e), round(s, 6)) for e, s in found]
    return r


class KBGraphSearch(KBSearch):
    """``kb_graph``: entities by vector search, ``kb_hops`` hops, the passages that mention them."""

    def rank(self, eng, q_ent: np.ndarray, q_pass: np.ndarray, threshold: float, param: QueryParam) -> Ranked:
        return graph_rank(eng, q_ent, q_pass, threshold, self.config.kb_seed_entities, self.config.kb_hops,
                          self.graph_queries())
