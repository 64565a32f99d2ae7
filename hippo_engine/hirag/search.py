"""The hi_* modes as search objects (see :mod:`hippo_engine.retrieve.search`).

A :class:`HiRAGSearch` encodes the queries and asks the ``HiRAG`` component (its context
builder, :meth:`~hippo_engine.hirag.component.HiRAG.contexts`) for each query's assembled
context; its ranking is the context's passages (:func:`~.modes.solution_from_context`). Contexts
always carry their provenance (:mod:`~hippo_engine.hirag.provenance`); solutions only with
``QueryParam(explain=True)``, which changes no ranking.
"""
from __future__ import annotations

from collections.abc import Callable

from hippo_engine.config import QueryParam, RetrievalConfig
from hippo_engine.datatypes import HiContext, QuerySolution
from hippo_engine.hirag.modes import MODE_SPECS, solution_from_context
from hippo_engine.retrieve.encoding import encode_queries
from hippo_engine.retrieve.search import ContextBuilder, QuerySearch


class HiRAGSearch(QuerySearch):
    """One hi_* ``mode``: the reader sees the assembled context (``reads_context``)."""

    reads_context = True

    def __init__(self, mode: str, config: RetrievalConfig, hirag, encoder: Callable[[], object],
                 wrap_contexts: ContextBuilder):
        if not MODE_SPECS[mode].reads_context:
            raise ValueError(f"{mode!r} is not a HiRAG mode")
        super().__init__(mode, wrap_contexts)
        self.config, self.hirag, self._encoder = config, hirag, encoder

    def contexts(self, queries: list[str], param: QueryParam) -> list[HiContext]:
        """Each query's context, always with its provenance (why each item is there)."""
        return self._contexts(queries, param, explain=True)

    def retrieve(self, queries: list[str], param: QueryParam) -> list[QuerySolution]:
        """The contexts' rankings; with ``param.explain`` each solution carries its context's provenance."""
        return [solution_from_context(c, provenance=param.explain)
                for c in self._contexts(queries, param, explain=param.explain)]

    def _contexts(self, queries: list[str], param: QueryParam, explain: bool) -> list[HiContext]:
        q_fact, q_pass = encode_queries(self._encoder(), queries, self.config)
        return self.hirag.contexts(queries, self.mode, q_fact, q_pass, param.top_k or self.config.retrieval_top_k,
                                   explain=explain)
