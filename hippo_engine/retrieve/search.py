"""One search object per retrieval mode (the mode table of the ``HippoRAG`` facade maps to them).

A search is built from its config section and the collaborators it uses, injected as
zero-argument providers (models and the per-version ``Retriever`` load lazily); its context
builder (how its ranking becomes a reader context, :class:`~hippo_engine.datatypes.HiContext`)
is injected too. Every search answers three calls:

- ``retrieve(queries, param)``: a ``QuerySolution`` per query (passages best first);
- ``contexts(queries, param)``: each query's assembled context;
- ``wrap(solutions)``: contexts of already-ranked solutions.

:class:`DenseSearch` (``naive``) is the one dense ranking (``Retriever.dense_rank``, also
HippoRAG 2's fallback); :class:`~.hipporag2_search.HippoRAG2Search` (``hipporag2``) and
:class:`~hippo_engine.hirag.search.HiRAGSearch` (the hi_* modes) are the others.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from functools import partial

import numpy as np

from hippo_engine.config import QueryParam, RetrievalConfig
from hippo_engine.datatypes import HiContext, QuerySolution
from hippo_engine.retrieve.encoding import encode_queries
from hippo_engine.retrieve.retriever import Retriever

#: ``build(solutions, mode) -> contexts``: a context per ranked solution
ContextBuilder = Callable[[Sequence[QuerySolution], str], list[HiContext]]


class QuerySearch(ABC):
    """Base of the mode searches: ``mode``, whether the reader sees the assembled context
    (``reads_context``) rather than the top passages, and the injected context builders
    (``contexts_of`` for the mode's own ranking, ``wrap_contexts`` for given solutions)."""

    reads_context = False

    def __init__(self, mode: str, contexts_of: ContextBuilder, wrap_contexts: ContextBuilder | None = None):
        self.mode = mode
        self._contexts_of = contexts_of
        self._wrap = wrap_contexts or contexts_of

    @abstractmethod
    def retrieve(self, queries: list[str], param: QueryParam) -> list[QuerySolution]:
        """A ``QuerySolution`` per query."""

    def contexts(self, queries: list[str], param: QueryParam) -> list[HiContext]:
        """Each query's context: the mode's ranking given to its context builder."""
        return self._contexts_of(self.retrieve(queries, param), self.mode)

    def wrap(self, solutions: Sequence[QuerySolution]) -> list[HiContext]:
        """Contexts of already-ranked solutions (the reader's passages)."""
        return self._wrap(solutions, self.mode)


class DenseSearch(QuerySearch):
    """``naive``: dense passage retrieval over the passage vectors of the current ``Retriever``."""

    def __init__(self, config: RetrievalConfig, retriever: Callable[[], Retriever], encoder: Callable[[], object],
                 contexts_of: ContextBuilder, wrap_contexts: ContextBuilder | None = None, restrictor=None):
        super().__init__("naive", contexts_of, wrap_contexts)
        self.config, self.restrictor = config, restrictor     # restrictor: param.where's (see .filtering)
        self._retriever, self._encoder = retriever, encoder

    def retrieve(self, queries: list[str], param: QueryParam) -> list[QuerySolution]:
        k = param.top_k or self.config.retrieval_top_k
        r = self._retriever()
        if param.where is not None and self.restrictor is None:
            raise ValueError("where=: this search was built without access to the documents' metadata")
        only = None if param.where is None else self.restrictor.of(r, param.where)
        if only is not None and only.empty:
            return [QuerySolution.from_ranking(q, [], np.zeros(0)) for q in queries]
        _, q_pass = encode_queries(self._encoder(), queries, self.config)
        dense = r.dense_scores(q_pass)
        rank = r.dense_rank if only is None else partial(only.dense_rank, r)
        return [r.views.passages.solution(q, *rank(dense[:, j], k)) for j, q in enumerate(queries)]
