"""Evaluation helpers: retrieval recall and QA exact match / F1 (pure functions)."""
from .metrics import (
    DEFAULT_RECALL_KS,
    exact_match,
    f1,
    normalize_answer,
    qa_metrics,
    qa_metrics_per_query,
    recall_at_k,
    recall_at_k_per_query,
)

__all__ = [
    "DEFAULT_RECALL_KS",
    "exact_match",
    "f1",
    "normalize_answer",
    "qa_metrics",
    "qa_metrics_per_query",
    "recall_at_k",
    "recall_at_k_per_query",
]
