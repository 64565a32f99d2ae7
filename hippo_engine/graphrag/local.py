"""``graphrag_local``: nano-graphrag's local query as a search object.

The query's entities by vector search, their communities' reports, the entities and their relations,
and their text units, in one context (:class:`~.local_context.LocalContextBuilder`, injected). The
reader reads that context (``rag_qa``); ``retrieve`` ranks the text units. Needs communities: a
query builds missing ones without LLM reports (``community_auto_llm_reports=0``) or asks for
``build_communities()``; it never writes reports itself.
"""
from __future__ import annotations

from hippo_engine.config import QueryParam
from hippo_engine.datatypes import HiContext
from hippo_engine.graphrag.engine_search import EngineContextSearch
from hippo_engine.graphrag.local_context import LocalContextBuilder
from hippo_engine.modes import ModeSpec
from hippo_engine.retrieve.search import SearchParts


class GraphRAGLocalSearch(EngineContextSearch):
    """``graphrag_local``; ``builder`` assembles each query's context; its ranking: the text units."""

    def __init__(self, spec: ModeSpec, builder: LocalContextBuilder, **engine):
        super().__init__(spec, **engine)
        self.builder = builder

    @classmethod
    def build(cls, spec: ModeSpec, parts: SearchParts) -> GraphRAGLocalSearch:
        return cls(spec, LocalContextBuilder(parts.config.graphrag), **cls.engine_parts(parts))

    def own_contexts(self, queries: list[str], param: QueryParam) -> list[HiContext]:
        """Each query's assembled context."""
        eng = self.engine()
        q_ent, _ = self.encode(queries)
        return [self.builder.build(eng, q, q_ent[j], param, self.limit(param)) for j, q in enumerate(queries)]
