"""Explanations under the default on a real ``ner`` index (issues 24, 38): every explained passage's terms
(seed terms, dense prior, dense term) add up to the score it was returned with (``check``: the PPR solver's
tolerance, over the walk's largest probability for the one score's walk terms, within 1e-4), the score shown
is the score explained (``placed_by="score"``: the one score of ``retrieve/second/fusion.py``; ``"ppr"``: the one
walk's probability), and explaining changes no ranking.

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

from .common import MUSIQUE_TRAIN_DIR, ForbiddenLLM, uptime

#: the largest check accepted for the one score (its walk terms are probabilities over the walk's largest)
SCORE_CHECK = 1e-4


def check(explained) -> tuple[dict[str, int], float, int]:
    """Placements, the largest check and the mismatches of ``explained`` (solutions searched with
    ``explain=True``): terms that do not add up to the explained score as ``check`` says, or an explained
    score that is not the score returned."""
    placed: dict[str, int] = {}
    worst, bad = 0.0, 0
    for sol in explained:
        for e, score in zip(sol.explanations, np.asarray(sol.doc_scores), strict=True):
            placed[e.placed_by] = placed.get(e.placed_by, 0) + 1
            if e.placed_by == "dense_fallback":
                continue
            worst = max(worst, e.check)
            total = sum(s.contribution for s in e.seeds) + e.dense_prior + e.dense_term
            bad += abs(abs(total - e.score) - e.check) > 1e-12
            bad += abs(e.score - float(score)) > 1e-12 * max(1.0, abs(float(score)))
            bad += e.check > SCORE_CHECK
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
    same = all(a.passage_ids == b.passage_ids and np.array_equal(a.doc_scores, b.doc_scores)
               for a, b in zip(plain, explained, strict=True))
    placed, worst, bad = check(explained)
    print(f"{len(qs)} questions, top {args.top}; default on this index: second_hop={cfg.second_hop!r}, "
          f"second_hop_head={cfg.second_hop_head}, head_weight={cfg.head_weight}, dense_weight={cfg.dense_weight}; "
          f"explained in {seconds:.1f} s")
    print(f"rankings unchanged by explain: {same}; placements: {placed}; largest check {worst:.2e} "
          f"(accepted up to {SCORE_CHECK:g}); mismatches: {bad}")
    print(f"load after: {uptime()}")
    return 0 if same and not bad else 1


if __name__ == "__main__":
    sys.exit(main())
