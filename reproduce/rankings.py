"""Recall@k and a rankings hash on the MuSiQue subset: the "behaviour unchanged" check of a refactor.

    python -m reproduce rankings [--variant openie|ner|both] [--limit N] [--work DIR] [--data DIR] [--out FILE]

Variants, both with the recognition filter off and no LLM call (an LLM that raises on any call):
    * ``openie``: ``extractor="openie"`` with the released GPT-3.5 OpenIE file imported;
    * ``ner``: ``extractor="ner"`` (spaCy, the LLM-free path).

Both rank with one walk, no top-rank rule and no dense term, passed explicitly (:data:`PAPER_WALK`:
``second_hop="none"``, ``dense_agree=0``, ``dense_weight=0``), so the hashes stay those of the paper's path
whatever the engine's ``"auto"`` defaults choose for a ``ner`` index (there: a second walk and one score of
three terms, ``hippo_engine/auto.py``).

Each variant builds its index once under ``<work>/<variant>/`` (default work folder
``outputs/reproduce/rankings``) with the table commands' runner (same dataset loading, OpenIE import
and index manifest; an index built from other inputs is refused) and reuses it afterwards. All
questions are retrieved in one ``retrieve()`` call. Printed per variant: Recall@1/2/5/10/20 (%, as
the tables compute it) and the **rankings hash**: the first 16 hex digits of the SHA-256 of the
canonical JSON (sorted keys, no spaces, ASCII) of, per question in order, the top-20 passages as
``[passage id, score]`` pairs, the id being ``"chunk-" + md5(passage text)`` and the score the float64
value written exactly with ``float.hex``. Equal hashes mean equal rankings and bit-identical scores.
The payload itself goes to ``<work>/<variant>/rankings.json`` so that two runs can be diffed.

The result (command, figures, hashes, the engine's git commit, load from ``uptime``) is written to
``reproduce/results/rankings/README.md`` (``rankings-first<N>.md`` with ``--limit``). The commit is
that of the checkout ``hippo_engine`` is imported from, so the module can be run against another
worktree's engine (``PYTHONPATH=<that worktree>``) to get the figures before a change.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import math
import shlex
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from . import common
from .common import (
    RESULTS_DIR,
    ForbiddenLLM,
    setup_logging,
    write_result,
)
from .harness import option

VARIANTS = ("openie", "ner")
KS = (1, 2, 5, 10, 20)
#: passages per question that enter the hash
TOP = 20
OUT_DIR = RESULTS_DIR / "rankings"
#: the retrieval settings every variant runs with: HippoRAG 2's one walk, no top-rank rule
PAPER_WALK: dict = {"second_hop": "none", "dense_agree": 0, "dense_weight": 0.0}
LABELS = {"openie": "HippoRAG 2, released GPT-3.5 OpenIE imported, filter off",
          "ner": 'HippoRAG 2, extractor="ner" (spaCy, no LLM), filter off'}


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The ``rankings`` command's options."""
    ap.add_argument("--variant", choices=(*VARIANTS, "both"), default="both", help="index variant (default both)")
    option(ap, "--limit", help="only the first N questions (the corpus is whole)")
    option(ap, "--work", help="index folders, one per variant in <work>/<variant> (default %(default)s)")
    option(ap, "--data")
    option(ap, "--out", help="result markdown (default reproduce/results/rankings/README.md, "
                             "rankings-first<N>.md with --limit)")
    option(ap, "--embedder")
    option(ap, "--verbose")


# ----------------------------------------------------------------------------- the hash
def passage_id(text: str) -> str:
    """``"chunk-" + md5(text)``: the engine's passage id, computed here so the hash does not depend
    on where the engine keeps its id helpers."""
    return "chunk-" + hashlib.md5(text.encode("utf-8")).hexdigest()


def ranking_payload(solutions: Sequence, top: int = TOP) -> list[list[list[str]]]:
    """Per question, its first ``top`` passages as ``[passage id, float64 score as float.hex]``."""
    out = []
    for sol in solutions:
        docs, scores = list(sol.docs[:top]), list(sol.doc_scores[:top])
        if len(scores) != len(docs):
            raise ValueError(f"{len(docs)} passages but {len(scores)} scores for {sol.question!r}")
        out.append([[passage_id(d), float(s).hex()] for d, s in zip(docs, scores, strict=True)])
    return out


def canonical_json(payload) -> str:
    """Sorted keys, no spaces, ASCII only: one text per payload."""
    return json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)


def rankings_hash(payload) -> str:
    """First 16 hex digits of the SHA-256 of :func:`canonical_json` of the payload."""
    return hashlib.sha256(canonical_json(payload).encode("ascii")).hexdigest()[:16]


def recall_at(solutions: Sequence, gold_docs: Sequence[Sequence[str]], ks: Sequence[int] = KS) -> dict[int, float]:
    """Mean Recall@k in % (distinct gold passages found in the first k; the tables' definition)."""
    from .tables.results import recall_curve

    entries = []
    for sol, gold in zip(solutions, gold_docs, strict=True):
        rank: dict[str, int] = {}
        for r, d in enumerate(sol.docs, 1):
            rank.setdefault(d, r)
        gold = list(dict.fromkeys(gold))
        entries.append({"gold_ranks": [rank.get(g) for g in gold], "n_gold": len(gold)})
    return {k: 100 * v for k, v in recall_curve(entries, ks).items()}


# ----------------------------------------------------------------------------- running
def _runner_args(args: argparse.Namespace, variant: str) -> argparse.Namespace:
    """What the tables' ``Runner`` reads from its arguments, for one variant's index folder."""
    # Runner appends "-<extractor>" to the folder name for extractors other than openie
    save_dir = args.work / variant / "index"
    return argparse.Namespace(save_dir=str(save_dir), embedder=args.embedder, llm=None, llm_base_url=None,
                              llm_backend=None, quiet=True, no_filter=True, shuffle_corpus=None,
                              openie=None if variant == "openie" else "none")


def run_variant(args: argparse.Namespace, dataset, variant: str, *, llm=None, encoder=None) -> dict:
    """Build or reuse ``variant``'s index, retrieve every question, return the figures and hash."""
    from .tables.methods import hippo_method
    from .tables.runner import Runner

    runner = Runner(_runner_args(args, variant), dataset, [], llm=llm or ForbiddenLLM(), encoder=encoder,
                    extractor=variant)
    try:
        if variant == "openie" and runner.openie is None:
            raise SystemExit(f"no openie_*.json beside {dataset.corpus_path}: "
                             "the openie variant needs the released file")
        t = time.perf_counter()
        runner.prepare_index()
        index_s = time.perf_counter() - t
        rag = runner.open(hippo_method(False, **PAPER_WALK))
        try:
            t = time.perf_counter()
            solutions = rag.retrieve(list(dataset.questions))
            retrieve_s = time.perf_counter() - t
        finally:
            rag.close()
    finally:
        runner.close()
    payload = ranking_payload(solutions)
    folder = args.work / variant
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "rankings.json").write_text(canonical_json(payload) + "\n", encoding="ascii")
    return {"variant": variant, "questions": len(solutions), "recall": recall_at(solutions, dataset.gold_docs),
            "hash": rankings_hash(payload), "index": runner.index_note, "index_s": index_s,
            "retrieve_s": retrieve_s, "index_dir": str(runner.save_dir),
            "fallbacks": sum(bool(getattr(s, "used_fallback", False)) for s in solutions)}


def _markdown(results: list[dict], argv: Sequence[str], commit: str, load_before: str, load_after: str,
              dataset) -> str:
    # only the options that change the figures: folders are paths of the machine the run was made on
    shown, skip = [], False
    for a in argv[1:] if argv[:1] == ["rankings"] else argv:   # the command's own name is in argv
        if skip:
            skip = False
        elif a in ("--work", "--data", "--out"):
            skip = True
        elif not a.startswith(("--work=", "--data=", "--out=")):
            shown.append(a)
    command = "python -m reproduce rankings " + " ".join(shlex.quote(a) for a in shown)
    lines = ["# Rankings hash and Recall@k on the MuSiQue subset", "",
             f"{len(dataset)} MuSiQue train questions, {len(dataset.docs):,} passages "
             "(`../shared/data/musique/hipporag_v1_train/`, see `SOURCES.md`), default embedder, filter off, "
             "no LLM call. The hash is the first 16 hex digits of the SHA-256 of the canonical JSON of, per "
             f"question, the top-{TOP} `[chunk id, float.hex(score)]` pairs (see `reproduce/rankings.py`); equal "
             "hashes mean the same rankings with bit-identical scores. Runs of the same command against other "
             "commits' engines sit beside this file (`before_<commit>.md`).", "",
             "```bash", command.strip(), "```", "",
             f"Engine commit: `{commit}`. Machine: {common.machine()}.", "",
             f"Load (`uptime`) before: `{load_before}`; after: `{load_after}`.", "",
             "| variant | " + " | ".join(f"R@{k}" for k in KS) + " | rankings hash | index | retrieval |",
             "| --- | " + " | ".join("---" for _ in KS) + " | --- | --- | --- |"]
    for r in results:
        lines.append(f"| {LABELS[r['variant']]} | " + " | ".join(f"{r['recall'][k]:.1f}" for k in KS)
                     + f" | `{r['hash']}` | {r['index']} | {r['retrieve_s']:.1f} s |")
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace, argv: Sequence[str], *, llm=None, encoder=None) -> int:
    """Run the chosen variants; print and write the figures. ``llm`` / ``encoder`` are for tests."""
    from hippo_engine.evaluation.datasets import load_dataset

    setup_logging(args.verbose)
    if args.limit is not None and args.limit <= 0:
        raise SystemExit("--limit must be positive")
    data = Path(args.data)
    if not (data.is_dir() and any(data.glob("*_corpus.json"))):
        print(f"rankings: skipped, the MuSiQue subset is not at {data} (see ../shared/data/SOURCES.md; "
              "pass --data DIR)")
        return 0
    dataset = load_dataset(data).head(args.limit)
    if dataset.gold_docs is None:
        raise SystemExit(f"{data}: the questions have no gold passages; recall cannot be measured")
    variants = VARIANTS if args.variant == "both" else (args.variant,)
    commit, load_before = common.engine_commit(), common.uptime()
    import hippo_engine
    print(f"engine {Path(hippo_engine.__file__).resolve().parent} at {commit}; {len(dataset)} questions")
    results = []
    for v in variants:
        r = run_variant(args, dataset, v, llm=llm, encoder=encoder)
        results.append(r)
        print(f"{v}: " + " / ".join(f"R@{k} {r['recall'][k]:.1f}" for k in KS) + f"  hash {r['hash']}  "
              f"(index {r['index']}; retrieval {r['retrieve_s']:.1f} s; dense fallback {r['fallbacks']})")
    if any(math.isnan(x) for r in results for x in r["recall"].values()):
        raise SystemExit("recall is NaN")
    out = args.out or OUT_DIR / ("README.md" if args.limit is None else f"rankings-first{args.limit}.md")
    path = write_result(out, _markdown(results, argv, commit, load_before, common.uptime(), dataset))
    print(path)
    return 0


if __name__ == "__main__":
    from .common import module_main
    sys.exit(module_main(sys.modules[__name__]))
