"""Fast PPR on the MuSiQue subset (issue 26, point 1): Recall@1/2/5/10/20 and the rankings hash
of the default PPR solver ("auto") beside forced push and forced exact, on the indexes of
``python -m reproduce rankings`` and with its walk (``PAPER_WALK``: one walk, no top-rank rule;
recognition filter off, no LLM call), so the hashes compare with that command's; ``--walk engine``:
the engine's default walk instead (e.g. the second walk on a ``ner`` index).

    python -m reproduce.ppr_musique [--work /tmp/rank_final] [--variant both] [--r-max 1e-5] [--walk paper|engine]
        [--out FILE]

``--work`` is the rankings command's ``--work`` (its indexes are reused, or built there).
"""
from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from hippo_engine.retrieve.ppr.push import DEFAULT_R_MAX

from .common import ForbiddenLLM, uptime, write_result
from .harness import option
from .rankings import KS, PAPER_WALK, VARIANTS, _runner_args, ranking_payload, rankings_hash, recall_at

SOLVERS = ("auto", "exact", "push")


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The command's options."""
    option(ap, "--work", help=None)
    ap.add_argument("--variant", choices=(*VARIANTS, "both"), default="both")
    option(ap, "--data", help=None)
    option(ap, "--embedder", help=None)
    option(ap, "--out", help="markdown file (default: print only)")
    ap.add_argument("--r-max", type=float, default=DEFAULT_R_MAX, help="ppr_push_r_max (the default's)")
    ap.add_argument("--walk", choices=("paper", "engine"), default="paper",
                    help="paper: the rankings command's one walk; engine: the engine's defaults (second walk "
                         "and top-rank rule as configured by default)")


def solve_variant(args: argparse.Namespace, dataset, variant: str, encoder=None) -> list[dict]:
    """Retrieve every question once per solver on ``variant``'s index (``encoder``: the
    tables' default embedder when None)."""
    from .tables.methods import hippo_method
    from .tables.runner import Runner

    runner = Runner(_runner_args(args, variant), dataset, [], llm=ForbiddenLLM(), encoder=encoder,
                    extractor=variant)
    rows = []
    try:
        runner.prepare_index()
        for solver in SOLVERS:
            walk = PAPER_WALK if args.walk == "paper" else {}
            rag = runner.open(hippo_method(False, ppr_solver=solver, ppr_push_r_max=args.r_max, **walk))
            try:
                t = time.perf_counter()
                sols = rag.retrieve(list(dataset.questions))
                secs = time.perf_counter() - t
            finally:
                rag.close()
            rows.append({"variant": variant, "solver": solver, "recall": recall_at(sols, dataset.gold_docs),
                         "hash": rankings_hash(ranking_payload(sols)), "retrieve_s": round(secs, 1),
                         "top10": [s.docs[:10] for s in sols]})
            print(f"{variant} {solver}: " + " / ".join(f"R@{k} {rows[-1]['recall'][k]:.1f}" for k in KS)
                  + f" hash {rows[-1]['hash']} ({secs:.1f} s, load {uptime()})", flush=True)
    finally:
        runner.close()
    exact = next(r for r in rows if r["solver"] == "exact")["top10"]
    for r in rows:
        r["same_top10"] = round(sum(a == b for a, b in zip(r["top10"], exact, strict=True)) / len(exact), 3)
    return rows


def run(args: argparse.Namespace, argv: Sequence[str] = (), encoder=None) -> int:
    """Every variant and solver; prints the table and writes it to ``--out``."""
    from hippo_engine.evaluation.datasets import load_dataset

    dataset = load_dataset(Path(args.data))
    variants = VARIANTS if args.variant == "both" else (args.variant,)
    load_before = uptime()
    rows = [r for v in variants for r in solve_variant(args, dataset, v, encoder)]
    argv = list(argv)[1:] if list(argv)[:1] == ["ppr-musique"] else list(argv)
    lines = [f"Command: `python -m reproduce ppr-musique {' '.join(argv)}`; {len(dataset)} questions; "
             f"load before {load_before}, after {uptime()}.", "",
             "| index | ppr_solver | " + " | ".join(f"R@{k}" for k in KS) + " | same top 10 as exact | hash | "
             "retrieval s |", "|---|---|" + "---|" * len(KS) + "---|---|---|"]
    for r in rows:
        lines.append(f"| {r['variant']} | {r['solver']} | " + " | ".join(f"{r['recall'][k]:.1f}" for k in KS)
                     + f" | {r['same_top10']} | {r['hash']} | {r['retrieve_s']} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        write_result(Path(args.out), text)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m reproduce.ppr_musique``."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(ap)
    argv = list(sys.argv[1:] if argv is None else argv)
    return run(ap.parse_args(argv), argv)


if __name__ == "__main__":
    raise SystemExit(main())
