"""One search object per retrieval mode: the base :class:`QuerySearch`, and ``naive``'s :class:`DenseSearch`.

A mode is a :class:`~hippo_engine.modes.ModeSpec` (registered once, :mod:`hippo_engine.modes`) naming its
search class; the factory (:mod:`hippo_engine.query.factory`) builds each class with
``build(spec, parts)`` from :class:`SearchParts`, the collaborators a search may use, handed over as
zero-argument providers where they load models, so nothing loads before it is used. A search owns its
whole job:

- ``retrieve(queries, param)``: a ``QuerySolution`` per query (passages best first), ``where=`` included
  (one step of the base: :meth:`QuerySearch.restriction` for a ranking over a ``Retriever``,
  :meth:`QuerySearch.allowed` for the passage ids a context mode keeps);
- ``contexts(queries, param)``: each query's assembled context; ``given_contexts(solutions, ...)``:
  contexts of already-ranked solutions;
- ``answer(items, template, param)``: the reader over the top passages of ranked solutions (the default)
  or over assembled contexts (:class:`ContextSearch`); ``graphrag_global`` answers by map-reduce.
"""
from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np

from hippo_engine.config import QueryParam, RetrievalConfig
from hippo_engine.datatypes import HiContext, QuerySolution
from hippo_engine.modes import ModeSpec
from hippo_engine.qa.reading import QAResult, Reader
from hippo_engine.retrieve.encoding import encode_queries
from hippo_engine.retrieve.filtering import Restrictor, context_solutions, empty_solutions
from hippo_engine.retrieve.restriction import Restriction
from hippo_engine.retrieve.retriever import Retriever

#: ``build(solutions, mode) -> contexts``: a context per ranked solution
ContextBuilder = Callable[[Sequence[QuerySolution], str], list[HiContext]]


@dataclass(frozen=True)
class SearchParts:
    """What a search class's ``build`` may use: the whole configuration (each search takes its own
    section), the ``IndexState`` (``index``), the HiRAG component (``hirag``: communities, context
    builders), providers of the encoder, the LLM and the current ``Retriever``, the ``reader``, the metadata
    ``restrictor``, the query NER (``query_ner``), whether the recognition filter is on by default
    (``filter_default``) and the LLM's name (for messages)."""

    config: Any
    index: Any
    hirag: Any
    encoder: Callable[[], Any]
    llm: Callable[[], Any]
    retriever: Callable[[], Retriever]
    reader: Reader
    restrictor: Restrictor
    query_ner: Any
    filter_default: Callable[[], bool]
    llm_name: str = ""

    @property
    def retrieval(self) -> RetrievalConfig:
        """The retrieval section (query instructions, ``retrieval_top_k``) every search reads."""
        return self.config.retrieval


class QuerySearch(ABC):
    """Base of the mode searches: its ``spec``, the injected context builders (``contexts_of`` for the
    mode's own ranking, ``wrap_contexts`` for given solutions), the ``reader`` it answers with and the
    metadata ``restrictor`` of ``where=``."""

    def __init__(self, spec: ModeSpec, contexts_of: ContextBuilder, wrap_contexts: ContextBuilder | None = None, *,
                 reader: Reader | None = None, restrictor: Restrictor | None = None):
        self.spec = spec
        self._contexts_of = contexts_of
        self._wrap = wrap_contexts or contexts_of
        self.reader, self.restrictor = reader, restrictor

    @classmethod
    @abstractmethod
    def build(cls, spec: ModeSpec, parts: SearchParts) -> QuerySearch:
        """The search of ``spec`` over ``parts``."""

    @property
    def mode(self) -> str:
        """The mode's name."""
        return self.spec.name

    @abstractmethod
    def retrieve(self, queries: list[str], param: QueryParam) -> list[QuerySolution]:
        """A ``QuerySolution`` per query."""

    def contexts(self, queries: list[str], param: QueryParam) -> list[HiContext]:
        """Each query's context: the mode's ranking given to its context builder."""
        return self._contexts_of(self.retrieve(queries, param), self.mode)

    def wrap(self, solutions: Sequence[QuerySolution]) -> list[HiContext]:
        """Contexts of already-ranked solutions (the reader's passages)."""
        return self._wrap(solutions, self.mode)

    def given_contexts(self, solutions: Sequence[QuerySolution], param: QueryParam,
                       check: Callable[[list[str]], list[str]]) -> list[HiContext]:
        """Contexts of already-ranked solutions (``check`` checks questions asked again)."""
        return self.wrap(solutions)

    def answer(self, items: Sequence[Any], template=None, param: QueryParam | None = None) -> QAResult:
        """``(solutions, responses, metadata)``: the reader over ranked solutions' top passages."""
        return self._reader().passages(items, template, param.qa_top_k if param is not None else None)

    def _reader(self) -> Reader:
        if self.reader is None:
            raise ValueError(f"{self.mode}: this search was built without a reader")
        return self.reader

    # --- where= ------------------------------------------------------------------------------
    def _restrictor(self) -> Restrictor:
        if self.restrictor is None:
            raise ValueError("where=: this search was built without access to the documents' metadata")
        return self.restrictor

    def restriction(self, r: Retriever, param: QueryParam) -> Restriction | None:
        """What ``param.where`` allows of ``r``'s rows (None without a filter)."""
        return None if param.where is None else self._restrictor().of(r, param.where)

    def allowed(self, param: QueryParam) -> frozenset[str] | None:
        """Passage ids of the documents matching ``param.where`` (None: no filter)."""
        if param.where is None:
            return None
        return frozenset(p for ps in self._restrictor().documents(param.where).values() for p in ps)


class ContextSearch(QuerySearch):
    """A mode whose reader reads its assembled context. Under ``where=`` its ranking is the allowed
    passages of its contexts over the whole graph, in their order (:func:`.filtering.context_solutions`),
    and its contexts are those passages' (``ranked_contexts``; ``index``: the whole ranking's size)."""

    def __init__(self, spec: ModeSpec, retrieval: RetrievalConfig, index, ranked_contexts: ContextBuilder,
                 wrap_contexts: ContextBuilder, *, reader: Reader | None = None, restrictor: Restrictor | None = None):
        super().__init__(spec, ranked_contexts, wrap_contexts, reader=reader, restrictor=restrictor)
        self.retrieval, self.index = retrieval, index

    @classmethod
    def context_parts(cls, parts: SearchParts) -> dict:
        """The keyword arguments of this base taken from ``parts``."""
        return {"retrieval": parts.retrieval, "index": parts.index, "ranked_contexts": parts.hirag.ranked_contexts,
                "wrap_contexts": parts.hirag.passage_contexts, "reader": parts.reader,
                "restrictor": parts.restrictor}

    @abstractmethod
    def own_contexts(self, queries: list[str], param: QueryParam) -> list[HiContext]:
        """Each query's context over the whole graph (no ``where=``)."""

    @abstractmethod
    def rank(self, queries: list[str], param: QueryParam) -> list[QuerySolution]:
        """The mode's own ranking (no ``where=``)."""

    def retrieve(self, queries: list[str], param: QueryParam) -> list[QuerySolution]:
        """The mode's ranking; under ``where=`` the allowed passages of its whole contexts."""
        pids = self.allowed(param)
        if pids is None:
            return self.rank(queries, param)
        if not pids:
            return empty_solutions(queries)
        wide = dataclasses.replace(param, top_k=max(len(self.index), 1))   # the whole ranking, then cut
        return context_solutions(self.own_contexts(queries, wide), pids,
                                 param.top_k or self.retrieval.retrieval_top_k)

    def contexts(self, queries: list[str], param: QueryParam) -> list[HiContext]:
        """Each query's context; under ``where=`` the allowed passages only."""
        if param.where is None:
            return self.own_contexts(queries, param)
        return self._contexts_of(self.retrieve(queries, param), self.mode)

    def given_contexts(self, solutions: Sequence[QuerySolution], param: QueryParam,
                       check: Callable[[list[str]], list[str]]) -> list[HiContext]:
        """The mode ranks in its own way: the solutions' questions are asked again."""
        return self.contexts(check([s.question for s in solutions]), param)

    def answer(self, items: Sequence[Any], template=None, param: QueryParam | None = None) -> QAResult:
        """The reader over each assembled context."""
        return self._reader().contexts(items, template)


class DenseSearch(QuerySearch):
    """``naive``: dense passage retrieval over the passage vectors of the current ``Retriever``."""

    def __init__(self, spec: ModeSpec, config: RetrievalConfig, retriever: Callable[[], Retriever],
                 encoder: Callable[[], object], contexts_of: ContextBuilder,
                 wrap_contexts: ContextBuilder | None = None, *, reader: Reader | None = None,
                 restrictor: Restrictor | None = None):
        super().__init__(spec, contexts_of, wrap_contexts, reader=reader, restrictor=restrictor)
        self.config = config
        self._retriever, self._encoder = retriever, encoder

    @classmethod
    def build(cls, spec: ModeSpec, parts: SearchParts) -> DenseSearch:
        return cls(spec, parts.retrieval, parts.retriever, parts.encoder, parts.hirag.ranked_contexts,
                   parts.hirag.passage_contexts, reader=parts.reader, restrictor=parts.restrictor)

    def retrieve(self, queries: list[str], param: QueryParam) -> list[QuerySolution]:
        k = param.top_k or self.config.retrieval_top_k
        r = self._retriever()
        only = self.restriction(r, param)
        if only is not None and only.empty:
            return [QuerySolution.from_ranking(q, [], np.zeros(0)) for q in queries]
        _, q_pass = encode_queries(self._encoder(), queries, self.config)
        dense = r.dense_scores(q_pass)
        rank = r.dense_rank if only is None else partial(only.dense_rank, r)
        return [r.views.passages.solution(q, *rank(dense[:, j], k)) for j, q in enumerate(queries)]
