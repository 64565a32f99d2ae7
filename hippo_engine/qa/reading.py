"""The reader as one object a search answers with: :class:`Reader`.

It reads ranked solutions (their top ``qa_top_k`` passages) or assembled contexts (the context in place of
the passage list) with the reader LLM and returns ``(solutions, responses, metadata)``, as ``rag_qa`` does.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from hippo_engine.datatypes import HiContext, QuerySolution
from hippo_engine.ids import chunk_id
from hippo_engine.llm.base import LLMClient
from hippo_engine.progress import announce, plural
from hippo_engine.qa.reader import ReaderSettings, answer_questions

QAResult = tuple[list[QuerySolution], list[str], list[dict]]


class Reader:
    """The reader LLM (``llm``: a zero-argument provider, named ``llm_name``) with its ``settings``."""

    def __init__(self, llm: Callable[[], LLMClient], settings: ReaderSettings, llm_name: str = ""):
        self._llm, self.settings, self.llm_name = llm, settings, llm_name

    def llm(self) -> LLMClient:
        """The reader's LLM (made on first use)."""
        return self._llm()

    def passages(self, solutions: Sequence[QuerySolution], template=None, qa_top_k: int | None = None) -> QAResult:
        """Answer ranked solutions over each one's top ``qa_top_k`` passages (else the settings')."""
        cfg = self.settings
        k = qa_top_k or cfg.qa_top_k
        announce(f"reader: {plural(len(solutions), 'LLM call')} ({self.llm_name!r}, top {k} passages each)")
        responses, metadata = answer_questions(self._llm(), solutions, k, progress=cfg.progress,
                                               template=template, max_new_tokens=cfg.max_new_tokens,
                                               temperature=cfg.temperature)
        return list(solutions), responses, metadata

    def contexts(self, contexts: Sequence[HiContext], template=None) -> QAResult:
        """Read each assembled context; ``metadata[i]["context_tokens"]`` holds its section sizes."""
        cfg = self.settings
        solutions = [context_solution(c) for c in contexts]
        mode = contexts[0].mode if contexts else ""
        responses, metadata = answer_questions(self._llm(), solutions, cfg.qa_top_k, progress=cfg.progress,
                                               template=template, max_new_tokens=cfg.max_new_tokens,
                                               temperature=cfg.temperature, contexts=[c.text for c in contexts],
                                               desc=f"QA reading ({mode})")
        for meta, ctx in zip(metadata, contexts, strict=True):
            meta["context_tokens"] = dict(ctx.tokens)
        return solutions, responses, metadata


def context_solution(ctx: HiContext, provenance: bool = False) -> QuerySolution:
    """A ``QuerySolution`` for a mode's context: its passage ranking, scored ``n/n, ..., 1/n``, with the
    passages' ids (``doc_ids`` are filled by the runner, which knows the documents); ``provenance``: with the
    context's items and their reasons (``QuerySolution.provenance``)."""
    n = len(ctx.passages)
    scores = np.arange(n, 0, -1, dtype=np.float64) / max(n, 1)
    return QuerySolution(question=ctx.query, docs=list(ctx.passages), doc_scores=scores,
                         seed_entities=list(ctx.entities),
                         passage_ids=[chunk_id(p) for p in ctx.passages],
                         provenance=list(ctx.provenance) if provenance else [])
