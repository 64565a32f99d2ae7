"""``graphrag_local``: nano-graphrag's local query as a search object.

The query's entities by vector search, their communities' reports, the entities and their relations,
and their text units, in one context (:class:`~.local_context.LocalContextBuilder`, injected). The
reader reads that context (``rag_qa``); ``retrieve`` ranks the text units. Needs communities: a
query builds missing ones without LLM reports (``community_auto_llm_reports=0``) or asks for
``build_communities()``; it never writes reports itself.
"""
from __future__ import annotations

from collections.abc import Callable

from hippo_engine.config import QueryParam, RetrievalConfig
from hippo_engine.datatypes import HiContext, QuerySolution
from hippo_engine.graphrag.engine_search import EngineSearch
from hippo_engine.graphrag.local_context import LocalContextBuilder
from hippo_engine.hirag.modes import solution_from_context
from hippo_engine.retrieve.search import ContextBuilder


class GraphRAGLocalSearch(EngineSearch):
    """``graphrag_local``; ``builder`` assembles each query's context."""

    reads_context = True
    needs_communities = True

    def __init__(self, retrieval: RetrievalConfig, builder: LocalContextBuilder, hirag, encoder: Callable[[], object],
                 wrap_contexts: ContextBuilder, restrictor=None):
        super().__init__("graphrag_local", retrieval, hirag, encoder, wrap_contexts, restrictor=restrictor)
        self.builder = builder

    def contexts(self, queries: list[str], param: QueryParam) -> list[HiContext]:
        """Each query's assembled context."""
        eng = self.engine()
        q_ent, _ = self.encode(queries)
        return [self.builder.build(eng, q, q_ent[j], param, self.limit(param)) for j, q in enumerate(queries)]

    def retrieve(self, queries: list[str], param: QueryParam) -> list[QuerySolution]:
        """The contexts' passage rankings (text units)."""
        return [solution_from_context(c) for c in self.contexts(queries, param)]
