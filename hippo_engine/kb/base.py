"""The base of the kb_* searches: :class:`KBSearch` (one ranking function per mode, the rest shared).

A kb search encodes the queries, ranks passage graph nodes with its own :meth:`KBSearch.rank` on the
``HiRAG`` component's engine, and keeps, under ``where=``, only the passages of matching documents
(the ranking is computed as without a filter, then cut: entities and communities are not filtered).
``top_k`` is the limit; ``score_threshold`` (else ``kb_score_threshold``) the minimum cosine of a
vector match (passages in ``kb_vector``, seed entities in ``kb_graph``, communities in ``kb_global``).
Contexts are passage contexts of the ranking (the injected builders, as ``naive``'s). Where the index
store answers graph questions in its database (:meth:`~hippo_engine.store.base.IndexStore.graph_queries`,
FalkorDB), ``kb_graph``/``kb_hybrid`` traverse there and ``kb_global`` finds its communities through the
database's vector index, with the same results as in process.
"""
from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable

import numpy as np

from hippo_engine.config import KBConfig, QueryParam, RetrievalConfig
from hippo_engine.datatypes import QuerySolution
from hippo_engine.graphrag.engine_search import EngineSearch, passage_solution
from hippo_engine.modes import ModeSpec
from hippo_engine.qa.reading import Reader
from hippo_engine.retrieve.filtering import Restrictor
from hippo_engine.retrieve.search import ContextBuilder, QuerySearch, SearchParts
from hippo_engine.store.base import GraphQueries


class Ranked:
    """One query's ranking: passage graph ``nodes`` best first, their ``scores``, the ``seeds`` (names) used."""

    def __init__(self, nodes: list[int], scores: list[float], seeds: list | None = None):
        self.nodes, self.scores, self.seeds = nodes, scores, seeds or []


class KBSearch(EngineSearch, QuerySearch):
    """A kb_* mode built from the ``kb`` section (``config``)."""

    def __init__(self, spec: ModeSpec, retrieval: RetrievalConfig, config: KBConfig, hirag,
                 encoder: Callable[[], object], contexts_of: ContextBuilder,
                 wrap_contexts: ContextBuilder | None = None, *, reader: Reader | None = None,
                 restrictor: Restrictor | None = None):
        QuerySearch.__init__(self, spec, contexts_of, wrap_contexts, reader=reader, restrictor=restrictor)
        EngineSearch.__init__(self, retrieval, hirag, encoder)
        self.config = config

    @classmethod
    def build(cls, spec: ModeSpec, parts: SearchParts) -> KBSearch:
        return cls(spec, parts.retrieval, parts.config.kb, parts.hirag, parts.encoder, parts.hirag.ranked_contexts,
                   parts.hirag.passage_contexts, reader=parts.reader, restrictor=parts.restrictor)

    def graph_queries(self) -> GraphQueries | None:
        """The index store's graph questions when it answers them in its database (traversals and
        community search there), else None (the engine's graph in process)."""
        return self.hirag.index.db.graph_queries()

    def threshold(self, param: QueryParam) -> float:
        """The minimum cosine of a vector match in this call."""
        return self.config.kb_score_threshold if param.score_threshold is None else param.score_threshold

    def retrieve(self, queries: list[str], param: QueryParam) -> list[QuerySolution]:
        """A ``QuerySolution`` per query: the mode's ranking, at most ``top_k``, under ``where=``."""
        allowed = self.allowed(param)
        eng = self.engine()
        q_ent, q_pass = self.encode(queries)
        out = []
        for j, q in enumerate(queries):
            r = self.rank(eng, q_ent[j], q_pass[j], self.threshold(param), param)
            out.append(passage_solution(eng, q, r.nodes, r.scores, self.limit(param), allowed, r.seeds))
        return out

    @abstractmethod
    def rank(self, eng, q_ent: np.ndarray, q_pass: np.ndarray, threshold: float, param: QueryParam) -> Ranked:
        """One query's ranked passages."""


def by_score(nodes, scores) -> Ranked:
    """``nodes`` ranked by ``scores`` (descending; ties: lower node first)."""
    nodes = np.asarray(list(nodes), dtype=np.int64)
    scores = np.asarray(list(scores), dtype=np.float64)
    order = np.lexsort((nodes, -scores))
    return Ranked(nodes[order].tolist(), scores[order].tolist())
