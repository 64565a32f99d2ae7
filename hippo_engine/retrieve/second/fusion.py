"""One score per passage: the ranking score of a search that has more than the paper's one walk.

A passage's score is the sum of three terms, each computed over every passage (so the ranking is their
order and does not depend on how many passages are asked for; :func:`terms`):

- **walk**: the last walk's PPR probability relative to its largest (``p / max p``, 1 for its best
  passage): with a second walk (``second_hop``) the second walk, else the one walk;
- **head**: with a second walk, ``head_weight x`` the first walk's relative probability on the first
  walk's ``head`` best passages (``second_hop_head``), 0 elsewhere: the first walk, seeded from the
  query's best sentence alone, is the more precise at the top;
- **dense**: ``dense_weight x exp((cos - max cos) / dense_temperature)``: dense retrieval's vote, which
  is ``dense_weight`` on dense retrieval's best passage and falls off within a few hundredths of cosine,
  so it settles the head of the ranking where the graph's evidence is close and leaves its tail alone.

Both walk terms are linear in their reset vectors (a PPR walk of a scaled reset), so an explanation
splits them exactly into seed terms (:mod:`.explain`). Rows ``blocked`` by a metadata filter take no
part in any maximum and score ``-inf``.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: the order of the terms (explanations list them so)
TERMS = ("walk", "head", "dense")


@dataclass(frozen=True)
class Fusion:
    """How the terms are weighted (the retrieval settings of the same names)."""

    head: int = 2
    head_weight: float = 2.0
    dense_weight: float = 1.5
    dense_temperature: float = 0.015

    def terms(self, last: np.ndarray, dense: np.ndarray, first: np.ndarray | None = None,
              blocked: np.ndarray | None = None) -> dict[str, np.ndarray]:
        """Each term, (n_passages, b) by passage row like ``last`` (the last walk's probabilities),
        ``dense`` (cosines) and ``first`` (the first walk's, None with one walk)."""
        allowed = np.ones(len(last), bool)
        if blocked is not None and len(blocked):
            allowed[np.asarray(blocked, np.int64)] = False
        out = {"walk": relative(last, allowed)}
        out["head"] = np.zeros_like(out["walk"]) if first is None or self.head <= 0 or self.head_weight == 0 \
            else self.head_weight * head_of(relative(first, allowed), self.head, allowed)
        out["dense"] = np.zeros_like(out["walk"]) if self.dense_weight == 0 \
            else self.dense_weight * dense_vote(dense, self.dense_temperature, allowed)
        return out

    def score(self, last: np.ndarray, dense: np.ndarray, first: np.ndarray | None = None,
              blocked: np.ndarray | None = None) -> np.ndarray:
        """The ranking score: the sum of :meth:`terms` (``-inf`` on ``blocked`` rows)."""
        t = self.terms(last, dense, first, blocked)
        out = t["walk"] + t["head"] + t["dense"]
        if blocked is not None and len(blocked):
            out[np.asarray(blocked, np.int64)] = -np.inf
        return out


def make_fusion(config, second_walk: bool) -> Fusion | None:
    """The score of a retrieval section ``config`` (its "auto" settings resolved); None where it is the walk's
    PPR probability itself (one walk, no dense term: the paper's)."""
    dense_weight = float(config.dense_weight)
    if not second_walk and dense_weight == 0:
        return None
    return Fusion(int(config.second_hop_head), float(config.head_weight), dense_weight,
                  float(config.dense_temperature))


def _columns(x: np.ndarray) -> np.ndarray:
    """``x`` as float64 (rows, columns): one column for a vector."""
    a = np.asarray(x, np.float64)
    return a[:, None] if a.ndim == 1 else a


def relative(p: np.ndarray, allowed: np.ndarray) -> np.ndarray:
    """``p`` over its largest allowed value per column (0 where that is not positive; 0 on rows not allowed)."""
    p2 = np.where(allowed[:, None], _columns(p), 0.0)
    top = p2.max(axis=0) if len(p2) else np.zeros(p2.shape[1])
    out = np.divide(p2, top, out=np.zeros_like(p2), where=top > 0)
    return out.reshape(np.shape(p))


def head_of(rel: np.ndarray, head: int, allowed: np.ndarray) -> np.ndarray:
    """``rel`` on each column's ``head`` best allowed rows (ties to the lower row), 0 elsewhere: ``head``
    passes of argmax (which takes the first of equal maxima), not a sort of every passage."""
    r = _columns(rel)
    out = np.zeros_like(r)
    k = min(head, int(allowed.sum()))
    if not len(r) or k <= 0:
        return out.reshape(np.shape(rel))
    masked = np.where(allowed[:, None], r, -np.inf)
    cols = np.arange(r.shape[1])
    for _ in range(k):
        top = np.argmax(masked, axis=0)
        out[top, cols] = r[top, cols]
        masked[top, cols] = -np.inf
    return out.reshape(np.shape(rel))


def dense_vote(dense: np.ndarray, temperature: float, allowed: np.ndarray) -> np.ndarray:
    """``exp((cos - max allowed cos) / temperature)`` per column (1 on dense retrieval's best; 0 on rows not
    allowed)."""
    d = _columns(dense)
    if not len(d) or not allowed.any():
        return np.zeros(np.shape(dense))
    top = np.where(allowed[:, None], d, -np.inf).max(axis=0)
    out = np.where(allowed[:, None], np.exp(np.minimum(d - top, 0.0) / temperature), 0.0)
    return out.reshape(np.shape(dense))


__all__ = ["TERMS", "Fusion", "dense_vote", "head_of", "make_fusion", "relative"]
