"""Every retrieval mode side by side (issue 25): Recall@2/@5 on the MuSiQue subset (released
OpenIE imported, and ``extractor="ner"``) and on 2Wiki (``ner``), EM/F1 of every mode on the first
MuSiQue questions with the packaged reader, and LLM calls and tokens per query.

    python -m reproduce table-modes [--variant openie|ner|both|none] [--work DIR] [--copy-from DIR]
                                    [--twowiki-index DIR --twowiki-data DIR [--twowiki-sample N
                                    --twowiki-sample-modes M,..]] [--qa N [--qa-only] [--qa-modes M,..]]
                                    [--llm NAME] [--llm-base-url URL] [--parts DIR] [--out FILE]

Indexes: the ``rankings`` command's (``<work>/<variant>/index``, ``index-ner`` for ner; built with the
tables' runner when missing, or copied from ``--copy-from``, e.g. an existing ``rankings`` work folder,
so that folder is left as it was); 2Wiki: a copy of a given ``ner`` index (e.g. the one of
``table-recall-llm-free``) under ``<work>/2wiki-ner/index``. Communities are built explicitly, once per
index, with ``build_communities(max_llm_reports=0)``: hierarchical Leiden and a member listing per
community, no LLM call (the LLM reports of ``python -m reproduce communities`` cost ~10 s each with the
local LLM); the graphrag_* and kb_global modes read those listings. Retrieval runs with an LLM that
fails on any call (recognition filter off), so each retrieval mode is shown to make no LLM call. The
rankings hash of ``hipporag2`` (``reproduce/rankings.py``) is compared with the reference. With
``--qa N`` the first N questions of ``--qa-variant``'s index are answered by every mode with the
packaged reader prompt and the given LLM (default: the engine's default local LLM), its response cache
off; ``graphrag_global`` answers by map-reduce (one call per report batch, one reduce), the others by
one reader call over their context or top passages.

Each piece of the run is saved as a JSON part in ``--parts`` (default ``reproduce/results/modes/``) and
the README there is rendered from every part (:mod:`reproduce.modes_report`), so a run of one piece
keeps the others' figures.
"""
from __future__ import annotations

import argparse
import shutil
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from .common import ForbiddenLLM, setup_logging, uptime
from .harness import option
from .modes_qa import run_qa
from .modes_report import FOLDER, save_part, stamp, write_readme
from .rankings import (
    PAPER_WALK,
    _runner_args,
    ranking_payload,
    rankings_hash,
    recall_at,
)

#: the modes that return passages, in table order
MODES = ("hipporag2", "naive", "hi_local", "hi_global", "hi_bridge", "hi", "graphrag_local", "graphrag_global",
         "kb_vector", "kb_graph", "kb_hybrid", "kb_global")
KS = (2, 5)
#: the row of hipporag2 with the engine's own defaults (``"auto"``: on a ner index a second walk and
#: dense_agree=2, hippo_engine/auto.py); the ``hipporag2`` row is the paper's one walk (PAPER_WALK)
AUTO_ROW = "hipporag2 (auto)"


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The ``table-modes`` command's options."""
    ap.add_argument("--variant", choices=("openie", "ner", "both", "none"), default="both",
                    help="MuSiQue indexes whose recall is measured (none: 2Wiki and/or QA only)")
    ap.add_argument("--work", type=Path, default=Path("outputs/reproduce/modes"),
                    help="index folders, <work>/<variant>/index[-ner] (default %(default)s)")
    ap.add_argument("--copy-from", type=Path, default=None,
                    help="a rankings work folder whose indexes are copied when <work> has none")
    option(ap, "--data", help="the MuSiQue subset")
    ap.add_argument("--twowiki-index", type=Path, default=None, help="a ner index of the 2Wiki corpus (copied)")
    ap.add_argument("--twowiki-data", type=Path, default=None, help="the 2Wiki questions (with --twowiki-index)")
    ap.add_argument("--twowiki-limit", type=int, default=None, help="the first N 2Wiki questions (default all)")
    ap.add_argument("--twowiki-sample", type=int, default=None,
                    help="run --twowiki-sample-modes on the first N 2Wiki questions only (slow modes)")
    ap.add_argument("--twowiki-sample-modes", default="", help="the modes sampled (comma-separated)")
    ap.add_argument("--twowiki-sample-reason", default="slow on this machine", help="said beside the sample")
    ap.add_argument("--qa", type=int, default=0, help="answer the first N MuSiQue questions in every mode (0: no QA)")
    ap.add_argument("--qa-sample", type=int, default=None,
                    help="answer with --qa-sample-modes the first N questions only (slow modes)")
    ap.add_argument("--qa-sample-modes", default="", help="the modes sampled in QA (comma-separated)")
    ap.add_argument("--qa-sample-reason", default="slow on this machine", help="said beside the QA sample")
    ap.add_argument("--qa-redo", action="store_true", help="answer again the modes a saved QA part already has")
    ap.add_argument("--qa-only", action="store_true", help="with --qa: skip the MuSiQue recall tables")
    ap.add_argument("--qa-variant", choices=("openie", "ner"), default="openie", help="the index answered from")
    ap.add_argument("--qa-modes", default=",".join(MODES), help="modes answered with --qa (comma-separated)")
    ap.add_argument("--llm", default=None, help="reader LLM (default: the engine's default local LLM)")
    ap.add_argument("--llm-base-url", default=None, help="an OpenAI-compatible server for the reader")
    ap.add_argument("--llm-timeout", type=float, default=1800.0, help="seconds one reader call may take")
    ap.add_argument("--parts", type=Path, default=FOLDER, help="folder of the JSON parts and README")
    ap.add_argument("--out", type=Path, default=None, help="result markdown (default <parts>/README.md)")
    option(ap, "--embedder")
    option(ap, "--verbose", help=None)


def _index(args, dataset, variant: str, encoder=None):
    """The tables' runner over ``variant``'s index in ``args.work`` (copied or built when missing)."""
    from .tables.runner import Runner

    rargs = _runner_args(args, variant)
    runner = Runner(rargs, dataset, [], llm=ForbiddenLLM(), encoder=encoder, extractor=variant)
    if not (runner.save_dir / "hippo-index.json").exists() and args.copy_from is not None:
        src = args.copy_from / variant / runner.save_dir.name
        if (src / "hippo-index.json").exists():
            shutil.copytree(src, runner.save_dir, ignore=shutil.ignore_patterns("write.lock*"), dirs_exist_ok=True)
    runner.prepare_index()
    return runner


def _communities(rag) -> dict:
    """Build the communities once (listings, no LLM); their counts and the seconds it took."""
    t = time.perf_counter()
    built = rag.hirag.state() != "current"
    if built:
        rag.build_communities(max_llm_reports=0)
    cset = rag.hirag.communities(build=False)
    return {"communities": len(cset.communities), "levels": {str(k): v for k, v in cset.levels().items()},
            "seconds": time.perf_counter() - t, "built": built}


def recall_rows(rag, dataset, modes: Sequence[str], sample: int | None = None,
                sampled: Sequence[str] = ()) -> dict[str, dict]:
    """Per mode: Recall@k (%), questions, seconds, LLM calls made while retrieving (0), and the hash of
    its top 20. Modes in ``sampled`` run on the first ``sample`` questions only; with a sample every
    row also gets its recall on those questions (``recall_sample``)."""
    out = {}
    for mode in modes:
        qs, gold = list(dataset.questions), list(dataset.gold_docs)
        if sample is not None and mode in sampled:
            qs, gold = qs[:sample], gold[:sample]
        before = ForbiddenLLM.calls
        t = time.perf_counter()
        sols = rag.retrieve(qs, mode=mode)
        secs = time.perf_counter() - t
        row = {"recall": recall_at(sols, gold, KS), "questions": len(qs), "seconds": secs,
               "llm_calls": ForbiddenLLM.calls - before, "hash": rankings_hash(ranking_payload(sols))}
        if sample is not None:
            row["recall_sample"] = recall_at(sols[:sample], gold[:sample], KS)
        out[mode] = row
        print(f"  {mode:16s} {len(qs):5d} q " + " ".join(f"R@{k} {row['recall'][k]:5.1f}" for k in KS)
              + f"  {secs:7.1f} s  hash {row['hash']}", flush=True)
    return out


def run(args: argparse.Namespace, argv: Sequence[str], *, encoder=None, llm=None) -> int:
    """Recall of every mode per index, the hash check, QA when asked; one JSON part per piece, then
    the README from every part."""
    from hippo_engine.evaluation.datasets import load_dataset

    setup_logging(args.verbose)
    data = Path(args.data)
    if not (data.is_dir() and any(data.glob("*_corpus.json"))):
        print(f"table-modes: skipped, the MuSiQue subset is not at {data}")
        return 0
    musique = load_dataset(data)
    variants = {"both": ("openie", "ner"), "none": ()}.get(args.variant, (args.variant,))
    if args.qa and args.qa_variant not in variants:
        variants = (*variants, args.qa_variant)
    for variant in variants:
        runner = _index(args, musique, variant, encoder)
        try:
            if not (args.qa_only and args.qa) and args.variant in (variant, "both"):
                save_part(args.parts, _musique(args, argv, runner, musique, variant))
            if args.qa and variant == args.qa_variant:
                run_qa(args, argv, runner, musique, llm)
        finally:
            runner.close()
    if args.twowiki_index is not None and args.twowiki_data is not None:
        save_part(args.parts, _twowiki(args, argv, encoder))
    print(write_readme(args.parts, args.out))
    return 0


def _musique(args, argv, runner, musique, variant: str) -> dict:
    """The recall part of one MuSiQue index (communities built first when missing)."""
    from .tables.methods import hippo_method

    t0, load = time.perf_counter(), uptime()
    rag = runner.open(hippo_method(False, **PAPER_WALK))
    try:
        comm = _communities(rag)
        print(f"MuSiQue {variant}: {comm['communities']} communities ({comm['seconds']:.0f} s)", flush=True)
        rows = recall_rows(rag, musique, MODES)
    finally:
        rag.close()
    if variant == "ner":
        rows = _with_auto(rows, lambda: runner.open(hippo_method(False)), musique)
    entry = {"kind": "recall", "dataset": "MuSiQue", "variant": variant, "questions": len(musique),
             "passages": len(musique.docs), "comm": comm, "rows": rows}
    return stamp(argv, entry, t0, load)


def _twowiki(args, argv, encoder) -> dict:
    """Recall of every mode on a copy of a 2Wiki ner index."""
    from hippo_engine import HippoRAG
    from hippo_engine.evaluation.datasets import load_dataset

    t0, load = time.perf_counter(), uptime()
    ds = load_dataset(args.twowiki_data).head(args.twowiki_limit)
    work = args.work / "2wiki-ner" / "index"
    if not (work / "hippo-index.json").exists():
        shutil.copytree(args.twowiki_index, work, ignore=shutil.ignore_patterns("write.lock*"), dirs_exist_ok=True)
    def opened(**config):
        return HippoRAG(work, llm=ForbiddenLLM(), encoder=encoder, show_progress=False, use_filter=False, **config)

    rag = opened(**PAPER_WALK)
    sampled = [m for m in args.twowiki_sample_modes.split(",") if m]
    try:
        comm = _communities(rag)
        print(f"2Wiki ner: {comm['communities']} communities ({comm['seconds']:.0f} s)", flush=True)
        rows = recall_rows(rag, ds, MODES, args.twowiki_sample, sampled)
    finally:
        rag.close()
    entry = {"kind": "recall", "dataset": "2Wiki", "variant": "ner", "questions": len(ds), "passages": len(ds.docs),
             "comm": comm, "rows": _with_auto(rows, opened, ds, args.twowiki_sample)}
    if args.twowiki_sample is not None and sampled:
        entry["sample"] = {"n": args.twowiki_sample, "modes": sampled, "reason": args.twowiki_sample_reason}
    return stamp(argv, entry, t0, load)


def _with_auto(rows: dict, open_rag, dataset, sample: int | None = None) -> dict:
    """``rows`` with :data:`AUTO_ROW` after ``hipporag2``: hipporag2 over a memory ``open_rag()`` opens
    with the engine's defaults."""
    rag = open_rag()
    try:
        auto = recall_rows(rag, dataset, ["hipporag2"], sample)["hipporag2"]
    finally:
        rag.close()
    out = {}
    for mode, row in rows.items():
        out[mode] = row
        if mode == "hipporag2":
            out[AUTO_ROW] = auto
    return out


if __name__ == "__main__":
    from .common import module_main
    sys.exit(module_main(sys.modules[__name__]))
