"""The hi_* modes as search objects (see :mod:`hippo_engine.retrieve.search`).

A :class:`HiRAGSearch` encodes the queries and asks the ``HiRAG`` component (its context
builder, :meth:`~hippo_engine.hirag.component.HiRAG.contexts`) for each query's assembled
context; its ranking is the context's passages (:func:`~hippo_engine.qa.reading.context_solution`).
Contexts always carry their provenance (:mod:`~hippo_engine.hirag.provenance`); solutions only with
``QueryParam(explain=True)``, which changes no ranking.
"""
from __future__ import annotations

from collections.abc import Callable

from hippo_engine.config import QueryParam
from hippo_engine.datatypes import HiContext, QuerySolution
from hippo_engine.modes import ModeSpec
from hippo_engine.qa.reading import context_solution
from hippo_engine.retrieve.encoding import encode_queries
from hippo_engine.retrieve.search import ContextSearch, SearchParts


class HiRAGSearch(ContextSearch):
    """One hi_* mode (``spec``): the reader sees the assembled context."""

    def __init__(self, spec: ModeSpec, hirag, encoder: Callable[[], object], **context):
        if not spec.reads_context:
            raise ValueError(f"{spec.name!r} is not a HiRAG mode")
        super().__init__(spec, **context)
        self.hirag, self._encoder = hirag, encoder

    @classmethod
    def build(cls, spec: ModeSpec, parts: SearchParts) -> HiRAGSearch:
        return cls(spec, parts.hirag, parts.encoder, **cls.context_parts(parts))

    def own_contexts(self, queries: list[str], param: QueryParam) -> list[HiContext]:
        """Each query's context, always with its provenance (why each item is there)."""
        return self._contexts(queries, param, explain=True)

    def rank(self, queries: list[str], param: QueryParam) -> list[QuerySolution]:
        """The contexts' rankings; with ``param.explain`` each solution carries its context's provenance."""
        return [context_solution(c, provenance=param.explain)
                for c in self._contexts(queries, param, explain=param.explain)]

    def _contexts(self, queries: list[str], param: QueryParam, explain: bool) -> list[HiContext]:
        q_fact, q_pass = encode_queries(self._encoder(), queries, self.retrieval)
        return self.hirag.contexts(queries, self.mode, q_fact, q_pass, param.top_k or self.retrieval.retrieval_top_k,
                                   explain=explain)
