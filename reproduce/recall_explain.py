"""Explanations under the default second walk on a real ``ner`` index (issue 24): every explained passage's
terms add up to the score of the walk that placed it (``check`` within ``ppr_tol``), a passage ranked by
the second walk (``placed_by="ppr"``) is explained with the score it was returned with, a passage the first
walk kept in front (``"second_hop_head"``) with its score in the one-walk ranking, and explaining changes
no ranking.

    python -m reproduce.recall_explain --index DIR [--data DIR] [--top 5]

``--index``: an ``extractor="ner"`` index of the MuSiQue subset, e.g. ``<work>/ner/index-ner`` of
``python -m reproduce rankings``. Prints the placements, the largest check and the mismatches (0 expected),
with the load (``uptime``) before and after; exits 1 on a mismatch.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from .common import MUSIQUE_TRAIN_DIR, ForbiddenLLM
from .rankings import PAPER_WALK, uptime


def check(explained, one_walk) -> tuple[dict[str, int], float, int]:
    """Placements, the largest check and the mismatches of ``explained`` (solutions searched with
    ``explain=True``) against the one-walk solutions of the same questions."""
    placed: dict[str, int] = {}
    worst, bad = 0.0, 0
    for sol, one in zip(explained, one_walk, strict=True):
        first = dict(zip(one.passage_ids, np.asarray(one.doc_scores).tolist(), strict=True))
        for e, score in zip(sol.explanations, np.asarray(sol.doc_scores), strict=True):
            placed[e.placed_by] = placed.get(e.placed_by, 0) + 1
            if e.placed_by == "dense_fallback":
                continue
            worst = max(worst, e.check)
            total = sum(s.contribution for s in e.seeds) + e.dense_prior
            bad += abs(abs(total - e.score) - e.check) > 1e-15
            bad += e.placed_by == "ppr" and e.score != float(score)
            bad += e.placed_by == "second_hop_head" and e.score != first.get(e.passage_id)
    return placed, worst, int(bad)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m reproduce.recall_explain", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--index", type=Path, required=True, help="an extractor='ner' index of the MuSiQue subset")
    ap.add_argument("--data", type=Path, default=MUSIQUE_TRAIN_DIR, help="the MuSiQue subset (default %(default)s)")
    ap.add_argument("--top", type=int, default=5, help="passages explained per question (default 5)")
    args = ap.parse_args(argv)
    from hippo_engine import HippoRAG
    from hippo_engine.evaluation.datasets import load_dataset

    qs = list(load_dataset(args.data).questions)
    print(f"load before: {uptime()}")
    with HippoRAG(args.index, llm=ForbiddenLLM(), show_progress=False) as rag:
        if rag.index_state.extractor != "ner":
            raise SystemExit(f"{args.index}: not an extractor='ner' index")
        cfg = rag.retriever.config
        plain = rag.retrieve(qs, args.top)
        t = time.perf_counter()
        explained = rag.retrieve(qs, args.top, explain=True)
        seconds = time.perf_counter() - t
    with HippoRAG(args.index, llm=ForbiddenLLM(), show_progress=False, **PAPER_WALK) as rag:
        one = rag.retrieve(qs, rag.config.retrieval_top_k)
    same = all(a.passage_ids == b.passage_ids and np.array_equal(a.doc_scores, b.doc_scores)
               for a, b in zip(plain, explained, strict=True))
    placed, worst, bad = check(explained, one)
    print(f"{len(qs)} questions, top {args.top}; default on this index: second_hop={cfg.second_hop!r}, "
          f"second_hop_head={cfg.second_hop_head}, dense_agree={cfg.dense_agree}; explained in {seconds:.1f} s")
    print(f"rankings unchanged by explain: {same}; placements: {placed}; largest check {worst:.2e} "
          f"(ppr_tol {cfg.ppr_tol:g}); mismatches: {bad}")
    print(f"load after: {uptime()}")
    return 0 if same and not bad and worst < cfg.ppr_tol else 1


if __name__ == "__main__":
    sys.exit(main())
