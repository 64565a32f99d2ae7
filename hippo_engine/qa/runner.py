"""What the facade's query calls do, behind ``HippoRAG.retrieve``/``retrieve_context``/``qa``/``rag_qa``:
:class:`QueryRunner`.

A call's options are a :class:`~hippo_engine.config.QueryParam` (:func:`with_options`). The runner
checks the queries, runs the mode's search object (:class:`~hippo_engine.retrieve.searches.Searches`),
attaches document ids to the solutions, scores them against gold passages (Recall@k) and answers,
and reads them with the reader LLM (:func:`~.reader.answer_questions`), or, in a hi_* mode, each
query's assembled context (:meth:`~hippo_engine.hirag.component.HiRAG.answer`).
"""
from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from hippo_engine.config import QueryParam
from hippo_engine.datatypes import HiContext, QuerySolution
from hippo_engine.hirag.modes import solution_from_context
from hippo_engine.index.documents import attach_ids
from hippo_engine.inputs import check_queries
from hippo_engine.progress import announce, plural
from hippo_engine.qa.evaluate import answer_metrics, retrieval_metrics
from hippo_engine.qa.reader import ReaderSettings, answer_questions
from hippo_engine.retrieve.filtering import context_solutions, empty_solutions, keep_matching_documents

if TYPE_CHECKING:
    from hippo_engine.hirag.component import HiRAG
    from hippo_engine.index.state import IndexState
    from hippo_engine.llm.base import LLMClient
    from hippo_engine.retrieve.searches import Searches

#: rankings of one retrieve call: another writer may commit while a ranking runs or before its document
#: ids are read (see ``QueryRunner._attach_ids``); the last try keeps what it read
RANKING_TRIES = 3
#: modes whose ranking only reads the index: ranked inside one snapshot of the database (``_read_view``)
SNAPSHOT_MODES = ("hipporag2", "naive")
GoldDocs = Sequence[Sequence[str]]
GoldAnswers = Sequence[str | Sequence[str]]
Solutions = list[QuerySolution]
WithRecall = tuple[Solutions, dict[str, float]]
QAResult = tuple[Solutions, list[str], list[dict]]
QAEvalResult = tuple[Solutions, list[str], list[dict], dict, dict]


def with_options(param: QueryParam | None, **given: Any) -> QueryParam:
    """``param`` (default ``QueryParam()``) with the keyword options that were given (not None)."""
    param = param or QueryParam()
    changes = {k: v for k, v in given.items() if v is not None}
    return dataclasses.replace(param, **changes) if changes else param


def _all_solutions(queries: Sequence) -> bool:
    return bool(queries) and all(isinstance(q, QuerySolution) for q in queries)


class QueryRunner:
    """The query calls over one index: ``searches`` (the mode table), ``index`` (the ``IndexState``:
    emptiness, document ids), ``hirag`` (reads the hi_* contexts), ``llm`` (provider of the
    reader LLM, named ``llm_name``), the ``reader`` settings and ``retrieval_top_k`` (the Recall@k
    cut-offs reported)."""

    def __init__(self, searches: Searches, index: IndexState, hirag: HiRAG, llm: Callable[[], LLMClient],
                 reader: ReaderSettings, *, retrieval_top_k: int, llm_name: str = ""):
        self.searches, self.index, self.hirag = searches, index, hirag
        self._llm, self.reader, self.retrieval_top_k, self.llm_name = llm, reader, retrieval_top_k, llm_name

    def check_queries(self, queries: Sequence[str], what: str) -> list[str]:
        """The queries as a list (``TypeError``/``ValueError`` for bad ones; ``RuntimeError`` on an empty index)."""
        queries = check_queries(queries, what)
        if len(self.index) == 0:
            raise RuntimeError(f"{what}(): the index in {self.index.save_dir} is empty; call index(docs) first")
        return list(queries)

    def _with_gold(self, solutions: Solutions, gold_docs: Sequence[Sequence[str]] | None, what: str):
        if gold_docs is None:
            return solutions
        return solutions, retrieval_metrics(solutions, gold_docs, what, self.retrieval_top_k)

    def retrieve(self, queries: Sequence[str], param: QueryParam, gold_docs: Sequence[Sequence[str]] | None = None):
        """A ``QuerySolution`` per query in ``param.mode`` with its document ids, or
        ``(solutions, Recall@k)`` when ``gold_docs`` is given."""
        queries = self.check_queries(queries, "retrieve")
        search = self.searches.search(param.mode)
        for attempt in range(RANKING_TRIES):
            with self._read_view(param.mode):
                self.index.refresh()                    # the version this ranking starts from
                start = self.index.loaded_version
                if param.where is not None and search.reads_context:
                    solutions = self._filtered(search, queries, param)
                else:
                    solutions = search.retrieve(queries, param)
                if self._attach_ids(solutions, param, start if attempt < RANKING_TRIES - 1 else None):
                    break
        return self._with_gold(solutions, gold_docs, "retrieve" if param.mode == "hipporag2" else
                               f"retrieve[{param.mode}]")

    def contexts(self, queries: Sequence[Any], param: QueryParam, what: str = "retrieve_context") -> list[HiContext]:
        """Each query's assembled context in ``param.mode``; already-ranked solutions are wrapped
        (hipporag2, naive) or asked again by their question (hi_* modes rank in their own way)."""
        search = self.searches.search(param.mode)
        given = _all_solutions(queries)
        if given and not search.reads_context:
            return search.wrap(queries)
        if given:   # hi_* modes retrieve in their own way
            queries = [q.question for q in queries]
        queries = self.check_queries(queries, what)
        if param.where is not None and search.reads_context:
            return self.hirag.ranked_contexts(self._filtered(search, queries, param), param.mode)
        return search.contexts(queries, param)

    def _contexts_only(self, queries: Sequence[Any], param: QueryParam) -> QAResult:
        """``only_need_context``: each query's context as its response, no LLM call (answers ``""``)."""
        contexts = self.contexts(queries, param, "rag_qa")
        solutions = [solution_from_context(c) for c in contexts]
        for s in solutions:
            s.answer = ""
        self._attach_ids(solutions, param)
        return solutions, [c.text for c in contexts], [
            {"llm_calls": 0, "prompt_tokens": 0, "completion_tokens": 0, "only_need_context": True,
             "context_tokens": dict(c.tokens), "error": None} for c in contexts]

    def _filtered(self, search, queries: list[str], param: QueryParam) -> Solutions:
        """A hi_* mode under ``param.where``: the allowed passages of its contexts, as solutions
        (:func:`~hippo_engine.retrieve.filtering.context_solutions`)."""
        pids = frozenset(p for ps in self.searches.restrictor.documents(param.where).values() for p in ps)
        if not pids:
            return empty_solutions(queries)
        wide = dataclasses.replace(param, top_k=max(len(self.index), 1))   # HiRAG's whole ranking, then cut
        return context_solutions(search.contexts(queries, wide), pids, param.top_k or self.retrieval_top_k)

    def _read_view(self, mode: str) -> contextlib.AbstractContextManager:
        """One snapshot of the database for a whole ranking in the modes that only read the index
        (:data:`SNAPSHOT_MODES`): what it reads while it ranks (a lazy PostgreSQL reader's passage texts
        and top-k) and the document ids then come from the version it started from, whatever other
        writers commit meanwhile. Other modes may write (communities built on first use) and rank outside
        one; :meth:`_attach_ids` checks their version instead."""
        return self.index.db.snapshot() if mode in SNAPSHOT_MODES else contextlib.nullcontext()

    def _attach_ids(self, solutions: Solutions, param: QueryParam, start: str | None = None) -> bool:
        """Each solution's document ids (under ``param.where``, the matching documents only). With ``start``
        (the index version the ranking started from), they are read in one snapshot of the database, and
        only if no writer committed since (a lazy PostgreSQL reader also reads passage texts during the
        ranking): else nothing is attached and False is returned (rank again)."""
        with self.index.db.snapshot():
            if start is not None and (self.index.loaded_version != start or self.index.version != start):
                return False
            attach_ids(solutions, self.index)
            if param.where is not None:
                keep_matching_documents(solutions, frozenset(self.searches.restrictor.documents(param.where)))
        return True

    def qa(self, solutions: Sequence[QuerySolution], template=None, param: QueryParam | None = None) -> QAResult:
        """Answer ranked solutions with the reader over each one's top ``qa_top_k`` passages."""
        cfg = self.reader
        k = (param.qa_top_k if param is not None else None) or cfg.qa_top_k
        announce(f"reader: {plural(len(solutions), 'LLM call')} ({self.llm_name!r}, top {k} passages each)")
        responses, metadata = answer_questions(self._llm(), solutions, k, show_progress=cfg.show_progress,
                                               template=template, max_new_tokens=cfg.max_new_tokens,
                                               temperature=cfg.temperature)
        return list(solutions), responses, metadata

    def read_contexts(self, contexts: Sequence[HiContext], template=None, param: QueryParam | None = None
                      ) -> QAResult:
        """The reader's part of ``rag_qa`` in a mode that reads assembled contexts (``reads_context``): the
        LLM calls only, without the index (document ids come after, :meth:`attach_ids`), so a caller may run
        it without holding the index."""
        param = with_options(param)
        own = getattr(self.searches.search(param.mode), "answer", None)  # answers its own way (graphrag_global)
        return own(contexts, template, param) if own is not None else self.hirag.answer(contexts, template)

    def attach_ids(self, solutions: Solutions, param: QueryParam) -> None:
        """Each solution's document ids (under ``param.where``, the matching documents only)."""
        self._attach_ids(solutions, param)

    def rag_qa(self, queries: Sequence[Any], gold_docs=None, gold_answers=None,
               template=None, dense: bool = False, param: QueryParam | None = None):
        """Retrieve (unless given solutions), read and score; see ``HippoRAG.rag_qa``."""
        param = with_options(param)
        if dense and param.mode == "hipporag2":
            param = dataclasses.replace(param, mode="naive")
        retrieval: dict = {}
        search = self.searches.search(param.mode)
        if param.only_need_context:
            solutions, responses, metadata = self._contexts_only(queries, param)
            if gold_docs is not None:
                retrieval = retrieval_metrics(solutions, gold_docs, f"rag_qa[{param.mode}]", self.retrieval_top_k)
        elif search.reads_context:
            contexts = self.contexts(queries, param, "rag_qa")
            solutions, responses, metadata = self.read_contexts(contexts, template, param)
            self.attach_ids(solutions, param)
            if gold_docs is not None:
                retrieval = retrieval_metrics(solutions, gold_docs, f"rag_qa[{param.mode}]", self.retrieval_top_k)
        else:
            if _all_solutions(queries):
                solutions = list(queries)
                if gold_docs is not None:
                    retrieval = retrieval_metrics(solutions, gold_docs, "rag_qa")
            else:
                out = self.retrieve(queries, param, gold_docs)
                solutions, retrieval = out if gold_docs is not None else (out, {})
            solutions, responses, metadata = self.qa(solutions, template, param)
        for m in metadata:
            m.setdefault("llm_calls", 1)
        if gold_docs is None and gold_answers is None:
            return solutions, responses, metadata
        return solutions, responses, metadata, retrieval, answer_metrics(solutions, gold_answers, "rag_qa")

