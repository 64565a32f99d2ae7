"""Top-rank rules: what goes first when the graph ranking and dense retrieval disagree.

``dense_first`` (:func:`.scoring.dense_first`) always puts dense retrieval's best passages first, so
Recall@1 equals dense's, also where the graph's first passage was better. :func:`dense_agree` moves
dense retrieval's best passage to the front only when the graph ranking has it among its ``within``
best: where the two agree on a passage, it goes first; where they do not, the graph's order stays.
"""
from __future__ import annotations

import numpy as np


def dense_agree(order: np.ndarray, scores: np.ndarray, dense: np.ndarray, within: int
                ) -> tuple[np.ndarray, np.ndarray]:
    """``order``/``scores`` (best first) with the passage of the largest ``dense`` score (ties: lower
    row) moved first when it is among the first ``within`` of ``order``; it takes the first score
    (scores stay non-increasing). ``within`` 0: unchanged."""
    if within <= 0 or len(order) == 0 or len(dense) == 0:
        return order, scores
    best = int(np.argmax(dense))         # the first of the largest: ties go to the lower row
    at = np.flatnonzero(np.asarray(order[:within]) == best)
    if len(at) == 0 or at[0] == 0:
        return order, scores
    i = int(at[0])
    new_order = np.concatenate([[best], order[:i], order[i + 1:]]).astype(np.asarray(order).dtype)
    new_scores = np.concatenate([[scores[0]], np.delete(np.asarray(scores), i)])
    return new_order, new_scores


__all__ = ["dense_agree"]
