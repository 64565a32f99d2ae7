"""``hipporag2``: HippoRAG 2 retrieval as a search object (see :mod:`.search`).

Per call: find the query entities when the linking strategy needs them, encode the queries and their
entities in one encoder call (:func:`.encoding.encode_with_mentions`), wrap the recognition filter when
it is on and the linking scores facts, rank with the ``Retriever`` (:meth:`.Retriever.search`), and turn its rows into
``QuerySolution``s (:class:`.passages.PassageTexts`), with the errors of failed LLM calls.
"""
from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from hippo_engine.config import QueryParam, RetrievalConfig
from hippo_engine.datatypes import Explanation, QuerySolution
from hippo_engine.llm.base import LLMClient
from hippo_engine.models.encoder import Encoder
from hippo_engine.modes import ModeSpec
from hippo_engine.progress import QUIET, Progress, announce, plural
from hippo_engine.qa.reading import Reader
from hippo_engine.retrieve.encoding import encode_with_mentions
from hippo_engine.retrieve.facts.linking import Linking
from hippo_engine.retrieve.facts.query_ner import QueryNER
from hippo_engine.retrieve.filtering import Restriction, Restrictor, empty_solutions, hide_outside
from hippo_engine.retrieve.retriever import FilterMany, RawResult, Retriever
from hippo_engine.retrieve.search import ContextBuilder, QuerySearch, SearchParts

if TYPE_CHECKING:
    from hippo_engine.retrieve.facts.recognition import RecognitionFilter

logger = logging.getLogger(__name__)


class HippoRAG2Search(QuerySearch):
    """HippoRAG 2 (paper section 3) over the current ``Retriever``.

    ``query_ner``: the query entity vectors (linkings that ``needs_ner``); ``llm``: provider of
    the LLM (named ``llm_name``) of the recognition filter, made on first use;
    ``filter_default``: whether the filter is on when neither the call nor the config says
    (off on an ``extractor="ner"`` index, which makes no LLM call by default); ``restrictor``:
    the metadata filters' (``param.where``, see :mod:`.filtering`).
    """

    def __init__(self, spec: ModeSpec, config: RetrievalConfig, retriever: Callable[[], Retriever],
                 encoder: Callable[[], Encoder], query_ner: QueryNER, llm: Callable[[], LLMClient],
                 filter_default: Callable[[], bool], contexts_of: ContextBuilder, *, llm_name: str = "",
                 progress: Progress = QUIET, reader: Reader | None = None, restrictor: Restrictor | None = None):
        super().__init__(spec, contexts_of, reader=reader, restrictor=restrictor)
        self.config = config
        self._retriever, self._encoder, self._query_ner = retriever, encoder, query_ner
        self._llm, self._filter_default, self.llm_name = llm, filter_default, llm_name
        self.progress = progress
        self._recognition_filter: RecognitionFilter | None = None

    @classmethod
    def build(cls, spec: ModeSpec, parts: SearchParts) -> HippoRAG2Search:
        return cls(spec, parts.retrieval, parts.retriever, parts.encoder, parts.query_ner, parts.llm,
                   parts.filter_default, parts.hirag.passage_contexts, llm_name=parts.llm_name,
                   progress=Progress.of(parts.config), reader=parts.reader, restrictor=parts.restrictor)

    @property
    def recognition_filter(self) -> RecognitionFilter:
        """The recognition filter (``RecognitionFilter``) on the engine's LLM, made on first use."""
        if self._recognition_filter is None:
            from hippo_engine.retrieve.facts.recognition import RecognitionFilter  # imports dspy: only when used
            cfg = self.config
            self._recognition_filter = RecognitionFilter(self._llm(), cfg.filter_program_path, cfg.max_filtered_facts,
                                                         progress=self.progress)
        return self._recognition_filter

    def use_filter(self, param: QueryParam) -> bool:
        """The recognition filter is on unless switched off (by the call, else the config);
        without either, ``filter_default()``."""
        if param.use_filter is not None:
            return param.use_filter
        if self.config.use_filter is not None:
            return self.config.use_filter
        return self._filter_default()

    def _filter(self, queries: list[str], param: QueryParam, linking: Linking, failed: dict) -> FilterMany | None:
        if not (linking.scores_facts and self.use_filter(param)):
            return None
        announce(f"recognition filter: up to {plural(len(queries), 'LLM call')} ({self.llm_name!r})")
        from hippo_engine.retrieve.facts.recognition import recording_filter  # imports dspy: only when used
        return recording_filter(self.recognition_filter, failed)

    def retrieve(self, queries: list[str], param: QueryParam) -> list[QuerySolution]:
        return self._search(queries, param)[2]

    def _search(self, queries: list[str], param: QueryParam
                ) -> tuple[Retriever, list[RawResult], list[QuerySolution], Restriction | None]:
        k = param.top_k or self.config.retrieval_top_k
        t0 = time.perf_counter()
        r = self._retriever()
        restriction = self.restriction(r, param)
        if restriction is not None and restriction.empty:
            return r, [RawResult() for _ in queries], empty_solutions(queries), restriction
        failed: dict[str, list[str]] = {}
        names = self._query_ner.names(queries, failed) if r.linking.needs_ner else None
        q_fact, q_pass, ner_vectors = encode_with_mentions(self._encoder(), queries, self.config, names)
        filter_many = self._filter(queries, param, r.linking, failed)
        results, timings = r.search(queries, q_fact, q_pass, k, filter_many, ner_vectors, explain=param.explain,
                                    restriction=restriction)
        sols = [r.views.passages.solution(q, res.order, res.scores, res)
                for q, res in zip(queries, results, strict=True)]
        for s in sols:
            s.errors.extend(failed.get(s.question, ()))
        if param.explain:
            from hippo_engine.retrieve.explain.core import explain_solutions
            explain_solutions(r, results, sols)
            if restriction is not None:
                hide_outside(r, restriction, [e for s in sols for e in s.explanations])
        logger.info("retrieve: %d queries in %.2fs (encoding %.2fs, filter %.2fs, PPR %.2fs, scoring+seeding "
                    "%.2fs); dense fallback for %d", len(queries), time.perf_counter() - t0,
                    time.perf_counter() - t0 - timings["total"], timings["filter"], timings["ppr"],
                    timings["scoring"] + timings["seeding"], sum(s.used_fallback for s in sols))
        return r, results, sols, restriction

    def explain(self, query: str, param: QueryParam, passage_ids: Sequence[str] | None = None,
                top: int = 5) -> list[Explanation]:
        """Explanations of ``query``'s top ``top`` passages, or of the passages ``passage_ids``
        (any indexed passage, any allowed one under ``param.where``; ``ValueError`` for another id)."""
        from hippo_engine.retrieve.explain.core import explain_result, rows_of
        param = dataclasses.replace(param, explain=True, top_k=max(top, param.top_k or 0))
        r, results, sols, restriction = self._search([query], param)
        res, sol = results[0], sols[0]
        if passage_ids is None:
            return sol.explanations[:top]
        if restriction is None:
            return explain_result(r, query, res, rows_of(r, passage_ids), list(passage_ids))
        ids = r.views.passages.store.ids
        row_of = {str(ids[i]): i for i in restriction.passage_rows.tolist()}
        outside = [p for p in passage_ids if p not in row_of]     # unknown ids answer the same: no oracle
        if outside:
            raise ValueError(f"explain: passage id(s) not among the passages the where filter allows: "
                             f"{', '.join(outside[:5])}")
        out = explain_result(r, query, res, [row_of[p] for p in passage_ids], list(passage_ids))
        hide_outside(r, restriction, out)
        return out
