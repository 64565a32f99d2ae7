"""Explanations on the MuSiQue subset (issue 22): exactness, rankings unchanged, cost.

    python -m reproduce explain [--variant openie|ner|both] [--limit N] [--work DIR] [--data DIR] [--out FILE]

Per variant (the ``rankings`` command's indexes under ``<work>/<variant>/``, built there once and
reused; released OpenIE imported / ``extractor="ner"``, filter off, no LLM call):

- **check**: for every question's top 5, |sum of the seed contributions + dense prior - PPR score|,
  its maximum over all explained passages (``Explanation.check``), against the PPR solver's ``ppr_tol``;
- **rankings unchanged**: the ``rankings`` hash (top 20, ``float.hex`` scores) of ``retrieve()`` and of
  ``retrieve(explain=True)``, beside the reference hash of ``python -m reproduce rankings``;
- **cost**: ``retrieve(questions, 5)`` and ``retrieve(questions, 5, explain=True)`` timed alternately
  (3 rounds each after a warm-up, ``retrieve(questions, explain=True)``, which explains every returned
  passage and builds the explanation's graph view; its time is reported apart); the ratio of the
  medians, and the load (``uptime``) around the run.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from .common import RESULTS_DIR, ForbiddenLLM, engine_commit, machine, setup_logging, uptime, write_result
from .harness import option
from .rankings import (
    LABELS,
    PAPER_WALK,
    VARIANTS,
    _runner_args,
    ranking_payload,
    rankings_hash,
)

#: the reference hashes of ``python -m reproduce rankings`` (all 100 questions)
REFERENCE = {"openie": "11059dbcf6e65b26", "ner": "f6e4b2e08f47bba9"}
OUT_DIR = RESULTS_DIR / "explain"
ROUNDS = 3
TOP = 5


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--variant", choices=(*VARIANTS, "both"), default="both", help="index variant (default both)")
    option(ap, "--limit")
    option(ap, "--work", help="the rankings command's index folders, <work>/<variant> (default %(default)s)")
    option(ap, "--data")
    option(ap, "--out", help="result markdown (default reproduce/results/explain/README.md)")
    option(ap, "--embedder")
    option(ap, "--verbose")


def _timed(fn) -> tuple[float, object]:
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def measure(rag, questions: list[str]) -> dict:
    """Hashes with and without explain, the check over every question's top 5, and the cost."""
    plain = rag.retrieve(questions)
    warm_s, explained = _timed(lambda: rag.retrieve(questions, explain=True))
    checks = [e.check for s in explained for e in s.explanations[:TOP] if e.placed_by == "ppr"]
    placed = [e.placed_by for s in explained for e in s.explanations[:TOP]]
    paths = sum(bool(e.paths) for s in explained for e in s.explanations[:TOP])
    warm_n = sum(len(s.explanations) for s in explained)
    base, expl = [], []
    for _ in range(ROUNDS):
        base.append(_timed(lambda: rag.retrieve(questions, TOP))[0])
        expl.append(_timed(lambda: rag.retrieve(questions, TOP, explain=True))[0])
    b, x = statistics.median(base), statistics.median(expl)
    return {"hash": rankings_hash(ranking_payload(plain)), "hash_explain": rankings_hash(ranking_payload(explained)),
            "max_check": max(checks) if checks else 0.0, "explained": len(placed), "ppr": len(checks),
            "fallback": placed.count("dense_fallback"), "with_paths": paths, "tol": rag.config.ppr.ppr_tol,
            "retrieve_s": b, "explain_s": x, "ratio": x / b, "first_explain_s": warm_s, "first_explained": warm_n}


def run_variant(args: argparse.Namespace, dataset, variant: str) -> dict:
    from .tables.methods import hippo_method
    from .tables.runner import Runner

    runner = Runner(_runner_args(args, variant), dataset, [], llm=ForbiddenLLM(), extractor=variant)
    try:
        runner.prepare_index()
        rag = runner.open(hippo_method(False, **PAPER_WALK))
        try:
            out = measure(rag, list(dataset.questions))
        finally:
            rag.close()
    finally:
        runner.close()
    return {"variant": variant, "index": runner.index_note, **out}


def _markdown(results: list[dict], commit: str, load_before: str, load_after: str, dataset, limit) -> str:
    lines = ["# Explanations on the MuSiQue subset (issue 22)", "",
             f"{len(dataset)} MuSiQue train questions, {len(dataset.docs)} passages, default embedder, filter off, "
             "no LLM call; the indexes of `python -m reproduce rankings`.", "", "```bash",
             "python -m reproduce explain --variant both" + (f" --limit {limit}" if limit else ""), "```", "",
             f"Engine commit: `{commit}`. Machine: {machine()}.", "",
             f"Load (`uptime`) before: `{load_before}`; after: `{load_after}`.", "",
             "| variant | explained (top 5) | by PPR | dense fallback | with a walk | max check | ppr_tol | "
             "hash | hash with explain | reference | retrieve top 5 | with explain | ratio |",
             "| --- " * 13 + "|"]
    for r in results:
        lines.append(f"| {LABELS[r['variant']]} | {r['explained']} | {r['ppr']} | {r['fallback']} | {r['with_paths']} "
                     f"| {r['max_check']:.2e} | {r['tol']:g} | `{r['hash']}` | `{r['hash_explain']}` "
                     f"| `{REFERENCE[r['variant']]}` | {r['retrieve_s']:.2f} s | {r['explain_s']:.2f} s "
                     f"| {r['ratio']:.2f}x |")
    lines += ["", "The check is |sum of the seed contributions + dense prior - score| of every passage placed by "
              "PPR (the dense-fallback passages have no graph walk). The terms are exact to 1e-10 (a backward "
              "solve in float64); the score is the engine's float32 PPR, stopped when the L1 change of an "
              "iterate falls below `ppr_tol`, so the check is bounded by the solver's own error, about `ppr_tol`.",
              "Cost: medians of 3 alternating runs of `retrieve(questions, 5)` and "
              "`retrieve(questions, 5, explain=True)` (which includes the retrieve) after a first explained run "
              "of every returned passage (" + ", ".join(f"{r['variant']}: {r['first_explained']} passages in "
                                                        f"{r['first_explain_s']:.1f} s" for r in results)
              + ", which also builds the explanations' graph view once per index version)."]
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace, argv: Sequence[str]) -> int:
    from hippo_engine.evaluation.datasets import load_dataset

    setup_logging(args.verbose)
    data = Path(args.data)
    if not (data.is_dir() and any(data.glob("*_corpus.json"))):
        print(f"explain: skipped, the MuSiQue subset is not at {data} (pass --data DIR)")
        return 0
    dataset = load_dataset(data).head(args.limit)
    variants = VARIANTS if args.variant == "both" else (args.variant,)
    commit, load_before = engine_commit(), uptime()
    results = []
    for v in variants:
        r = run_variant(args, dataset, v)
        results.append(r)
        print(f"{v}: max check {r['max_check']:.2e} over {r['ppr']} PPR passages; hash {r['hash']} / with explain "
              f"{r['hash_explain']} (reference {REFERENCE[v]}); retrieve {r['retrieve_s']:.2f} s, with explain "
              f"{r['explain_s']:.2f} s: {r['ratio']:.2f}x")
    path = write_result(args.out or OUT_DIR / "README.md",
                        _markdown(results, commit, load_before, uptime(), dataset, args.limit))
    print(path)
    return 0


if __name__ == "__main__":
    from .common import module_main
    sys.exit(module_main(sys.modules[__name__]))
