"""Retrieval and QA metrics of the HippoRAG 2 evaluation, as pure functions.

* ``Recall@k``: per query ``|top-k ∩ gold| / |gold|`` with the gold passages de-duplicated and
  passages compared as exact strings (``"title\\ntext"``); 0 for a query without gold passages;
  mean over queries.
* ``ExactMatch`` and token ``F1`` with SQuAD answer normalisation (lowercase, punctuation removed,
  the articles a/an/the removed, whitespace collapsed), the maximum over the gold aliases of a
  query, mean over queries.
"""
from __future__ import annotations

import logging
import re
import string
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Union

logger = logging.getLogger(__name__)

DEFAULT_RECALL_KS: tuple[int, ...] = (1, 2, 5, 10, 20, 30, 50, 100, 150, 200)

GoldAnswers = Union[str, Sequence[str]]  # noqa: UP007 (a runtime alias)

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = frozenset(string.punctuation)


# ----------------------------------------------------------------------------- retrieval
def _check_ks(ks: Iterable[int]) -> tuple[int, ...]:
    ks = tuple(ks)
    for k in ks:
        if not isinstance(k, int) or isinstance(k, bool) or k <= 0:
            raise ValueError(f"every k must be a positive integer, got {k!r}")
    return ks


def recall_at_k_per_query(retrieved: Sequence[Sequence[str]], gold: Sequence[Sequence[str]],
                          ks: Iterable[int] = DEFAULT_RECALL_KS) -> list[dict[str, float]]:
    """Recall@k of each query: ``[{"Recall@1": r1, "Recall@2": r2, ...}, ...]``.

    ``retrieved[i]`` is the ranked list of passages for query ``i`` (best first); ``gold[i]``
    its gold passages (duplicates count once). A query without gold passages scores 0.
    A ``k`` larger than the retrieved list uses the whole list.
    """
    ks = _check_ks(ks)
    if len(retrieved) != len(gold):
        raise ValueError(f"retrieved has {len(retrieved)} queries but gold has {len(gold)}")
    out = []
    for ranked, gold_docs in zip(retrieved, gold, strict=False):
        gold_set = set(gold_docs)
        row = {}
        for k in ks:
            if not gold_set:
                row[f"Recall@{k}"] = 0.0
            else:
                hits = len(set(ranked[:k]) & gold_set)
                row[f"Recall@{k}"] = hits / len(gold_set)
        out.append(row)
    return out


def recall_at_k(retrieved: Sequence[Sequence[str]], gold: Sequence[Sequence[str]],
                ks: Iterable[int] = DEFAULT_RECALL_KS) -> dict[str, float]:
    """Mean Recall@k over queries: ``{"Recall@1": ..., "Recall@2": ..., ...}``.

    See :func:`recall_at_k_per_query`. With no queries every value is 0.0.
    """
    ks = _check_ks(ks)
    rows = recall_at_k_per_query(retrieved, gold, ks)
    n = len(rows)
    return {f"Recall@{k}": (sum(r[f"Recall@{k}"] for r in rows) / n if n else 0.0) for k in ks}


# ----------------------------------------------------------------------------- QA
def normalize_answer(text: str) -> str:
    """SQuAD answer normalisation: lowercase, drop punctuation, drop a/an/the, collapse spaces."""
    if text is None:
        return ""
    text = str(text).lower()
    text = "".join(ch for ch in text if ch not in _PUNCT)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def _as_aliases(golds: GoldAnswers) -> list[str]:
    if golds is None:
        return []
    if isinstance(golds, str):
        return [golds]
    return [g for g in golds if g is not None]


def exact_match(pred: str, golds: GoldAnswers) -> float:
    """1.0 if the normalised prediction equals the normalised form of any gold alias, else 0.0."""
    p = normalize_answer(pred)
    return float(any(p == normalize_answer(g) for g in _as_aliases(golds)))


def _token_f1(pred: str, gold: str) -> float:
    p_tokens = normalize_answer(pred).split()
    g_tokens = normalize_answer(gold).split()
    common = Counter(p_tokens) & Counter(g_tokens)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision = same / len(p_tokens)
    recall = same / len(g_tokens)
    return 2 * precision * recall / (precision + recall)


def f1(pred: str, golds: GoldAnswers) -> float:
    """Token F1 between the normalised prediction and gold, the maximum over gold aliases.

    Tokens are the whitespace-separated words after :func:`normalize_answer`; shared tokens
    are counted with multiplicity. No gold alias gives 0.0.
    """
    aliases = _as_aliases(golds)
    return max((_token_f1(pred, g) for g in aliases), default=0.0)


def qa_metrics_per_query(preds: Sequence[str], gold_answers: Sequence[GoldAnswers]) -> list[dict[str, float]]:
    """``[{"ExactMatch": em, "F1": f1}, ...]`` per query.

    ``gold_answers[i]`` is a list of aliases or a single string.
    """
    if len(preds) != len(gold_answers):
        raise ValueError(f"{len(preds)} predictions but {len(gold_answers)} gold answer lists")
    return [{"ExactMatch": exact_match(p, g), "F1": f1(p, g)} for p, g in zip(preds, gold_answers, strict=False)]


def qa_metrics(preds: Sequence[str], gold_answers: Sequence[GoldAnswers]) -> dict[str, float]:
    """Mean ExactMatch and F1 over queries: ``{"ExactMatch": float, "F1": float}``.

    With no queries both values are 0.0.
    """
    rows = qa_metrics_per_query(preds, gold_answers)
    n = len(rows)
    if not n:
        return {"ExactMatch": 0.0, "F1": 0.0}
    return {"ExactMatch": sum(r["ExactMatch"] for r in rows) / n, "F1": sum(r["F1"] for r in rows) / n}
