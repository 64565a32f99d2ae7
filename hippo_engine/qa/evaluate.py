"""Scoring solutions against gold labels: Recall@k of the retrieved passages, EM/F1 of answers.

Both attach the gold labels to the ``QuerySolution``s they score.
"""
from __future__ import annotations

import logging
from collections.abc import Sequence

from hippo_engine.datatypes import QuerySolution

logger = logging.getLogger(__name__)

#: Recall@k cut-offs reported by ``retrieve`` (those up to ``retrieval_top_k``)
RECALL_KS = (1, 2, 5, 10, 20, 30, 50, 100, 150, 200)


def retrieval_metrics(solutions: Sequence[QuerySolution], gold_docs: Sequence[Sequence[str]], what: str,
                      top_k: int | None = None) -> dict[str, float]:
    """Attach ``gold_docs`` to the solutions and return their mean Recall@k, for the ``RECALL_KS``
    up to ``top_k`` (None: the metrics module's default cut-offs). A gold entry is a passage's text,
    a document's id or a document's text (:func:`gold_found`): it is found within k when one of the
    first k passages is it or belongs to it."""
    from hippo_engine.evaluation.metrics import DEFAULT_RECALL_KS
    if isinstance(gold_docs, str) or len(gold_docs) != len(solutions):
        raise ValueError(f"{what}(): {len(gold_docs)} gold doc lists for {len(solutions)} queries")
    flat = [i for i, g in enumerate(gold_docs) if isinstance(g, str) or not isinstance(g, (list, tuple, set))]
    if flat:
        raise ValueError(f"{what}(): gold_docs must hold one list of passages per query; items {flat[:10]} "
                         f"are not lists (a flat list of passages would score every query 0)")
    for s, g in zip(solutions, gold_docs, strict=True):
        s.gold_docs = list(g)
    ks = list(DEFAULT_RECALL_KS) if top_k is None else [k for k in RECALL_KS if k <= max(top_k, 1)]
    found = [gold_found(s, list(g)) for s, g in zip(solutions, gold_docs, strict=True)]
    metrics = {f"Recall@{k}": (sum(sum(r < k for r in f) / len(f) if f else 0.0 for f in found) / len(found)
                               if found else 0.0) for k in ks}
    if top_k is not None:
        logger.info("%s recall: %s", what, {k: round(v, 4) for k, v in metrics.items()})
    return metrics


def gold_found(solution: QuerySolution, gold: Sequence[str]) -> list[float]:
    """For each distinct gold entry of one query, the 0-based rank of the first passage that matches it
    (``inf``: none does). A passage matches an entry that is its text, the id of a document holding it, or
    a document's text (its derived id, :func:`~hippo_engine.ids.document_id`, holds the passage)."""
    from hippo_engine.ids import document_id
    entries = list(dict.fromkeys(gold))
    derived = {g: document_id(g) for g in entries}
    first = dict.fromkeys(entries, float("inf"))
    for rank, doc in enumerate(solution.docs):
        held = set(solution.doc_ids[rank]) if rank < len(solution.doc_ids) else set()
        for g in entries:
            if first[g] == float("inf") and (g == doc or g in held or derived[g] in held):
                first[g] = rank
    return list(first.values())


def gold_matches(solution: QuerySolution, rank: int) -> bool:
    """Whether passage ``rank`` (0-based) of ``solution`` matches one of its gold entries (see :func:`gold_found`)."""
    if not solution.gold_docs:
        return False
    from hippo_engine.ids import document_id
    doc = solution.docs[rank]
    held = set(solution.doc_ids[rank]) if rank < len(solution.doc_ids) else set()
    return any(g == doc or g in held or document_id(g) in held for g in solution.gold_docs)


def answer_metrics(solutions: Sequence[QuerySolution], gold_answers: Sequence | None, what: str) -> dict:
    """Attach gold answers (a string or a list of aliases per query) to the solutions and return
    ExactMatch/F1 ({} when none given)."""
    if gold_answers is None:
        return {}
    from hippo_engine.evaluation.metrics import qa_metrics as score_answers
    if len(gold_answers) != len(solutions):
        raise ValueError(f"{what}(): {len(gold_answers)} gold answer lists for {len(solutions)} queries")
    for s, g in zip(solutions, gold_answers, strict=True):
        s.gold_answers = [g] if isinstance(g, str) else list(g)
    metrics = score_answers([s.answer or "" for s in solutions], [s.gold_answers for s in solutions])
    logger.info("%s: %s", what, metrics)
    return metrics
