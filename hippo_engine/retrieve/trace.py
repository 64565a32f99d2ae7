"""What a search keeps for explanations (``search(..., explain=True)``): each query's trace, read by
:mod:`.explain`. Nothing here changes a ranking."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from hippo_engine.retrieve.scoring import top_k

if TYPE_CHECKING:
    from hippo_engine.retrieve.facts.linking import Block
    from hippo_engine.retrieve.raw_result import RawResult
    from hippo_engine.retrieve.restriction import Restriction
    from hippo_engine.retrieve.second.fusion import Fusion
    from hippo_engine.retrieve.second.second_hop import SecondHop


def _nonzero(M: np.ndarray, c: int) -> tuple[np.ndarray, np.ndarray]:
    nz = np.flatnonzero(M[:, c])
    return nz, M[nz, c].copy()


def keep_trace(block: Block, results: list[RawResult], graph_cols: np.ndarray, R: np.ndarray | None,
               probs: np.ndarray | None, walks: dict[str, Any], hop: SecondHop | None, agree: int,
               restriction: Restriction | None = None, fusion: Fusion | None = None) -> None:
    """Keep in each result's ``trace`` its dense scores (``dense``), candidate fact (rows, scores)
    (``candidates``) and, when the query reached the graph (``graph_cols``), the walk that ranked it:
    ``reset`` (nonzero nodes and weights) and ``ppr`` (its scores by passage row), ``ranked`` (the scores
    the ranking was made from, ``probs``), ``agree`` (``dense_agree``) and ``fusion`` (the score's
    weights, :mod:`.second.fusion`; None: the score is the walk's probability). With a second hop (``walks``
    holds ``first``, ``second_reset`` and ``second``) that walk is the second: ``first`` then holds the
    first walk's (reset, ppr), ``head`` the rows of its head term (``second_hop_head``) and ``hop`` what
    seeded the second walk, in words. Under a filter, scores are -inf on the passages outside it
    (explanations rank among the allowed ones)."""
    def kept(scores: np.ndarray) -> np.ndarray:
        return scores.copy() if restriction is None else restriction.masked(scores)

    traces: list[dict] = []
    cands = block.candidates
    for j in range(block.size):
        traces.append({"dense": kept(block.dense[:, j]), "reset": None, "ppr": None, "ranked": None, "agree": agree,
                       "first": None, "head": None, "hop": None, "fusion": fusion,
                       "candidates": None if cands is None else (cands[0][j].copy(), cands[1][j].copy())})
        results[block.s + j].trace = traces[j]
    if R is None or probs is None:
        return
    second = hop is not None and "second" in walks
    for c, j in enumerate(graph_cols.tolist()):
        tr = traces[j]
        tr["ranked"] = kept(probs[:, c])
        if not second:
            tr.update(reset=_nonzero(R, c), ppr=tr["ranked"] if fusion is None else kept(walks["first"][:, c]))
            continue
        assert hop is not None
        first = kept(walks["first"][:, c])
        head = 0 if fusion is None else fusion.head
        tr.update(reset=_nonzero(walks["second_reset"], c), ppr=kept(walks["second"][:, c]),
                  first=(_nonzero(R, c), first), head=top_k(first, head), hop=hop.describe())


__all__ = ["keep_trace"]
