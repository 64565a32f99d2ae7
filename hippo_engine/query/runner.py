"""What the facade's query calls do, behind ``HippoRAG.retrieve``/``retrieve_context``/``qa``/``rag_qa``:
:class:`QueryRunner`.

A call's options are a :class:`~hippo_engine.config.QueryParam` (:func:`with_options`). The runner
checks the queries, runs the mode's search object (:class:`~.factory.Searches`), which ranks, assembles
contexts and answers in its own way, retries a ranking that another writer's commit overtook, attaches
document ids to the solutions and scores them against gold passages (Recall@k) and answers.
"""
from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Sequence
from typing import Any

from hippo_engine.config import QueryParam
from hippo_engine.datatypes import HiContext, QuerySolution
from hippo_engine.index.documents import attach_ids
from hippo_engine.index.state import IndexState
from hippo_engine.inputs import check_queries
from hippo_engine.modes import mode_spec
from hippo_engine.qa.evaluate import answer_metrics, retrieval_metrics
from hippo_engine.qa.reading import context_solution
from hippo_engine.query.factory import Searches
from hippo_engine.retrieve.filtering import keep_matching_documents

#: rankings of one retrieve call: another writer may commit while a ranking runs or before its document
#: ids are read (see ``QueryRunner._attach_ids``); the last try keeps what it read
RANKING_TRIES = 3
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
    """The query calls over one index: ``searches`` (a search object per mode; its ``reader`` answers),
    ``index`` (the ``IndexState``: emptiness, document ids) and ``retrieval_top_k`` (the Recall@k
    cut-offs reported)."""

    def __init__(self, searches: Searches, index: IndexState, *, retrieval_top_k: int):
        self.searches, self.index, self.retrieval_top_k = searches, index, retrieval_top_k

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
                solutions = search.retrieve(queries, param)
                if self._attach_ids(solutions, param, start if attempt < RANKING_TRIES - 1 else None):
                    break
        return self._with_gold(solutions, gold_docs, "retrieve" if param.mode == "hipporag2" else
                               f"retrieve[{param.mode}]")

    def contexts(self, queries: Sequence[Any], param: QueryParam, what: str = "retrieve_context") -> list[HiContext]:
        """Each query's assembled context in ``param.mode``; already-ranked solutions are wrapped
        (hipporag2, naive) or asked again by their question (modes that rank in their own way)."""
        search = self.searches.search(param.mode)
        if _all_solutions(queries):
            return search.given_contexts(queries, param, lambda qs: self.check_queries(qs, what))
        return search.contexts(self.check_queries(queries, what), param)

    def _contexts_only(self, queries: Sequence[Any], param: QueryParam) -> QAResult:
        """``only_need_context``: each query's context as its response, no LLM call (answers ``""``)."""
        contexts = self.contexts(queries, param, "rag_qa")
        solutions = [context_solution(c) for c in contexts]
        for s in solutions:
            s.answer = ""
        self._attach_ids(solutions, param)
        return solutions, [c.text for c in contexts], [
            {"llm_calls": 0, "prompt_tokens": 0, "completion_tokens": 0, "only_need_context": True,
             "context_tokens": dict(c.tokens), "error": None} for c in contexts]

    def _read_view(self, mode: str) -> contextlib.AbstractContextManager:
        """One snapshot of the database for a whole ranking in the modes that only read the index
        (their spec's ``snapshot``): what it reads while it ranks (a lazy PostgreSQL reader's passage texts
        and top-k) and the document ids then come from the version it started from, whatever other
        writers commit meanwhile. Other modes may write (communities built on first use) and rank outside
        one; :meth:`_attach_ids` checks their version instead."""
        return self.index.db.snapshot() if mode_spec(mode).snapshot else contextlib.nullcontext()

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
        return self.searches.reader.passages(solutions, template, param.qa_top_k if param is not None else None)

    def read_contexts(self, contexts: Sequence[HiContext], template=None, param: QueryParam | None = None
                      ) -> QAResult:
        """The reader's part of ``rag_qa`` in a mode that reads assembled contexts: the LLM calls only, without
        the index (document ids come after, :meth:`attach_ids`), so a caller may run it without holding the
        index."""
        param = with_options(param)
        return self.searches.search(param.mode).answer(contexts, template, param)

    def attach_ids(self, solutions: Solutions, param: QueryParam) -> None:
        """Each solution's document ids (under ``param.where``, the matching documents only)."""
        self._attach_ids(solutions, param)

    def rag_qa(self, queries: Sequence[Any], gold_docs=None, gold_answers=None,
               template=None, dense: bool = False, param: QueryParam | None = None):
        """Retrieve (unless given solutions), read and score; see ``HippoRAG.rag_qa``."""
        param = with_options(param)
        if dense and param.mode == "hipporag2":
            param = dataclasses.replace(param, mode="naive")
        search = self.searches.search(param.mode)
        if param.only_need_context:
            solutions, responses, metadata = self._contexts_only(queries, param)
            retrieval = self._metrics(solutions, gold_docs, f"rag_qa[{param.mode}]")
        elif search.spec.reads_context:
            contexts = self.contexts(queries, param, "rag_qa")
            solutions, responses, metadata = search.answer(contexts, template, param)
            self.attach_ids(solutions, param)
            retrieval = self._metrics(solutions, gold_docs, f"rag_qa[{param.mode}]")
        else:
            solutions, retrieval = self._ranked(queries, param, gold_docs)
            solutions, responses, metadata = search.answer(solutions, template, param)
        for m in metadata:
            m.setdefault("llm_calls", 1)
        if gold_docs is None and gold_answers is None:
            return solutions, responses, metadata
        return solutions, responses, metadata, retrieval, answer_metrics(solutions, gold_answers, "rag_qa")

    def _metrics(self, solutions: Solutions, gold_docs, what: str) -> dict:
        return {} if gold_docs is None else retrieval_metrics(solutions, gold_docs, what, self.retrieval_top_k)

    def _ranked(self, queries: Sequence[Any], param: QueryParam, gold_docs) -> WithRecall:
        """The solutions to read (given ones, or ranked now) and their Recall@k (empty without ``gold_docs``)."""
        if _all_solutions(queries):
            solutions = list(queries)
            return solutions, {} if gold_docs is None else retrieval_metrics(solutions, gold_docs, "rag_qa")
        out = self.retrieve(queries, param, gold_docs)
        return out if gold_docs is not None else (out, {})
