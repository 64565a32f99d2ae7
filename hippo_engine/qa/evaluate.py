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
    up to ``top_k`` (None: the metrics module's default cut-offs)."""
    from hippo_engine.evaluation.metrics import recall_at_k
    if isinstance(gold_docs, str) or len(gold_docs) != len(solutions):
        raise ValueError(f"{what}(): {len(gold_docs)} gold doc lists for {len(solutions)} queries")
    flat = [i for i, g in enumerate(gold_docs) if isinstance(g, str) or not isinstance(g, (list, tuple, set))]
    if flat:
        raise ValueError(f"{what}(): gold_docs must hold one list of passages per query; items {flat[:10]} "
                         f"are not lists (a flat list of passages would score every query 0)")
    for s, g in zip(solutions, gold_docs, strict=True):
        s.gold_docs = list(g)
    if top_k is None:
        return recall_at_k([s.docs for s in solutions], [list(g) for g in gold_docs])
    ks = [k for k in RECALL_KS if k <= max(top_k, 1)]
    metrics = recall_at_k([s.docs for s in solutions], [list(g) for g in gold_docs], ks=ks)
    logger.info("%s recall: %s", what, {k: round(v, 4) for k, v in metrics.items()})
    return metrics


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
