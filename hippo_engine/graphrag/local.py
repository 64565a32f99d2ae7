"""``graphrag_local``: nano-graphrag's local query as a search object.

The query's entities by vector search, their communities' reports, the entities and their relations,
and their text units, in one context (:class:`~.local_context.LocalContextBuilder`, injected). The
reader reads that context (``rag_qa``); ``retrieve`` ranks the text units. Needs communities: a
query builds missing ones without LLM reports (``community_auto_llm_reports=0``) or asks for
``build_communities()``; it never writes reports itself.
"""
from __future__ import annotations

from collections.abc import Callable

from hippo_engine.config import QueryParam
from hippo_engine.datatypes import HiContext, QuerySolution
from hippo_engine.graphrag.engine_search import EngineSearch
from hippo_engine.graphrag.local_context import LocalContextBuilder
from hippo_engine.modes import ModeSpec
from hippo_engine.qa.reading import context_solution
from hippo_engine.retrieve.search import ContextSearch, SearchParts


class GraphRAGLocalSearch(EngineSearch, ContextSearch):
    """``graphrag_local``; ``builder`` assembles each query's context."""

    def __init__(self, spec: ModeSpec, builder: LocalContextBuilder, hirag, encoder: Callable[[], object], **context):
        ContextSearch.__init__(self, spec, **context)
        EngineSearch.__init__(self, context["retrieval"], hirag, encoder)
        self.builder = builder

    @classmethod
    def build(cls, spec: ModeSpec, parts: SearchParts) -> GraphRAGLocalSearch:
        return cls(spec, LocalContextBuilder(parts.config.graphrag), parts.hirag, parts.encoder,
                   **cls.context_parts(parts))

    def own_contexts(self, queries: list[str], param: QueryParam) -> list[HiContext]:
        """Each query's assembled context."""
        eng = self.engine()
        q_ent, _ = self.encode(queries)
        return [self.builder.build(eng, q, q_ent[j], param, self.limit(param)) for j, q in enumerate(queries)]

    def rank(self, queries: list[str], param: QueryParam) -> list[QuerySolution]:
        """The contexts' passage rankings (text units)."""
        return [context_solution(c) for c in self.own_contexts(queries, param)]
