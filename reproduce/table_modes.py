"""Every retrieval mode side by side (issue 25): Recall@2/@5 on the MuSiQue subset (released
OpenIE imported, and ``extractor="ner"``) and optionally on 2Wiki (``ner``), F1 of every mode on
the first questions with the packaged reader, and LLM calls and tokens per query.

    python -m reproduce table-modes [--variant openie|ner|both] [--work DIR] [--copy-from DIR]
                                    [--twowiki-index DIR] [--twowiki-data DIR] [--qa N] [--llm NAME]
                                    [--llm-base-url URL] [--out FILE]

Indexes: the ``rankings`` command's (``<work>/<variant>/index``, ``index-ner`` for ner; built with the
tables' runner when missing, or copied from ``--copy-from``, e.g. an existing ``rankings`` work folder,
so that folder is left as it was). Communities are built explicitly, once per index, with
``build_communities(max_llm_reports=0)``: hierarchical Leiden and a member listing per community, no
LLM call (the LLM reports of ``python -m reproduce communities`` cost ~10 s each with the local LLM);
the graphrag_* and kb_global modes read those listings. Retrieval runs with an LLM that fails on any
call (recognition filter off), so each retrieval mode is shown to make no LLM call. The rankings hash
of ``hipporag2`` (``reproduce/rankings.py``) is compared with the reference. With ``--qa N`` the first
N questions are answered by every mode with the packaged reader prompt and the given LLM (default: the
engine's default local LLM); ``graphrag_global`` answers by map-reduce (one call per report batch,
one reduce), the others by one reader call over their context or top passages.
Results: ``reproduce/results/modes/README.md``.
"""
from __future__ import annotations

import argparse
import shutil
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from .common import MUSIQUE_TRAIN_DIR, RESULTS_DIR, ForbiddenLLM, setup_logging, write_result
from .rankings import _runner_args, engine_commit, machine, ranking_payload, rankings_hash, recall_at, uptime

#: the modes that return passages, in table order
MODES = ("hipporag2", "naive", "hi_local", "hi_global", "hi_bridge", "hi", "graphrag_local", "graphrag_global",
         "kb_vector", "kb_graph", "kb_hybrid", "kb_global")
KS = (2, 5)
REFERENCE = {"openie": "11059dbcf6e65b26", "ner": "f6e4b2e08f47bba9"}
OUT = RESULTS_DIR / "modes" / "README.md"
FOLDER_OPTIONS = ("--work", "--copy-from", "--data", "--twowiki-index", "--twowiki-data", "--out")


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The ``table-modes`` command's options."""
    ap.add_argument("--variant", choices=("openie", "ner", "both"), default="both")
    ap.add_argument("--work", type=Path, default=Path("outputs/reproduce/modes"),
                    help="index folders, <work>/<variant>/index[-ner] (default %(default)s)")
    ap.add_argument("--copy-from", type=Path, default=None,
                    help="a rankings work folder whose indexes are copied when <work> has none")
    ap.add_argument("--data", type=Path, default=MUSIQUE_TRAIN_DIR, help="the MuSiQue subset")
    ap.add_argument("--twowiki-index", type=Path, default=None, help="a ner index of the 2Wiki corpus (copied)")
    ap.add_argument("--twowiki-data", type=Path, default=None, help="the 2Wiki questions (with --twowiki-index)")
    ap.add_argument("--twowiki-limit", type=int, default=None, help="the first N 2Wiki questions")
    ap.add_argument("--qa", type=int, default=0, help="answer the first N MuSiQue questions in every mode (0: no QA)")
    ap.add_argument("--qa-modes", default=",".join(MODES), help="modes answered with --qa (comma-separated)")
    ap.add_argument("--llm", default=None, help="reader LLM (default: the engine's default local LLM)")
    ap.add_argument("--llm-base-url", default=None, help="an OpenAI-compatible server for the reader")
    ap.add_argument("--out", type=Path, default=None, help=f"result markdown (default {OUT})")
    ap.add_argument("--embedder", default=None, help="embedding model (default: the engine's)")
    ap.add_argument("-v", "--verbose", action="store_true")


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
    if rag.hirag.state() != "current":
        rag.build_communities(max_llm_reports=0)
    cset = rag.hirag.communities(build=False)
    return {"communities": len(cset.communities), "levels": cset.levels(), "seconds": time.perf_counter() - t}


def recall_rows(rag, dataset, modes: Sequence[str]) -> dict[str, dict]:
    """Per mode: Recall@k (%), seconds, LLM calls made while retrieving (0), and the hash of its top 20."""
    out = {}
    for mode in modes:
        before = ForbiddenLLM.calls
        t = time.perf_counter()
        sols = rag.retrieve(list(dataset.questions), mode=mode)
        secs = time.perf_counter() - t
        out[mode] = {"recall": recall_at(sols, dataset.gold_docs, KS), "seconds": secs,
                     "llm_calls": ForbiddenLLM.calls - before, "hash": rankings_hash(ranking_payload(sols))}
        print(f"  {mode:16s} " + " ".join(f"R@{k} {out[mode]['recall'][k]:5.1f}" for k in KS)
              + f"  {secs:6.1f} s  hash {out[mode]['hash']}")
    return out


def qa_rows(rag, dataset, n: int, modes: Sequence[str]) -> dict[str, dict]:
    """Per mode: EM/F1 on the first ``n`` questions, LLM calls and tokens per query."""
    from hippo_engine.config import QueryParam

    qs, gold, answers = list(dataset.questions[:n]), dataset.gold_docs[:n], dataset.gold_answers[:n]
    out = {}
    for mode in modes:
        t = time.perf_counter()
        _, _, meta, _, qa = rag.rag_qa(qs, gold_docs=gold, gold_answers=answers, param=QueryParam(mode=mode))
        calls = sum(m.get("llm_calls", 1) for m in meta)
        toks = sum(int(m.get("prompt_tokens") or 0) + int(m.get("completion_tokens") or 0) for m in meta)
        out[mode] = {"f1": 100 * qa["F1"], "em": 100 * qa["ExactMatch"], "calls": calls / n, "tokens": toks / n,
                     "seconds": time.perf_counter() - t, "errors": sum(bool(m.get("error")) for m in meta)}
        print(f"  {mode:16s} F1 {out[mode]['f1']:5.1f}  calls/q {out[mode]['calls']:.1f}  tokens/q "
              f"{out[mode]['tokens']:.0f}")
    return out


def run(args: argparse.Namespace, argv: Sequence[str], *, encoder=None, llm=None) -> int:
    """Recall of every mode per index, the hash check, QA when asked; write the markdown."""
    from hippo_engine.evaluation.datasets import load_dataset

    from .tables.methods import hippo_method

    setup_logging(args.verbose)
    data = Path(args.data)
    if not (data.is_dir() and any(data.glob("*_corpus.json"))):
        print(f"table-modes: skipped, the MuSiQue subset is not at {data}")
        return 0
    musique = load_dataset(data)
    load_before, results = uptime(), []
    for variant in (("openie", "ner") if args.variant == "both" else (args.variant,)):
        runner = _index(args, musique, variant, encoder)
        try:
            rag = runner.open(hippo_method(False))
            comm = _communities(rag)
            print(f"MuSiQue {variant}: {comm['communities']} communities ({comm['seconds']:.0f} s)")
            entry = {"dataset": "MuSiQue", "variant": variant, "questions": len(musique), "comm": comm,
                     "rows": recall_rows(rag, musique, MODES)}
            if args.qa and variant == "openie":
                entry["qa"] = _qa(args, runner, musique, llm)
            rag.close()
        finally:
            runner.close()
        results.append(entry)
    if args.twowiki_index is not None and args.twowiki_data is not None:
        results.append(_twowiki(args, encoder))
    text = _markdown(results, argv, load_before, uptime(), args)
    print(write_result(args.out or OUT, text))
    return 0


def _qa(args, runner, dataset, llm) -> dict:
    from hippo_engine import HippoRAG

    from .tables.methods import hippo_method

    kw = {} if args.llm_base_url is None else {"llm_base_url": args.llm_base_url}
    rag = HippoRAG(runner.save_dir, llm_model_name=args.llm, llm=llm, encoder=runner.encoder, show_progress=False,
                   **{**runner._overrides, **hippo_method(False).config, **kw})
    try:
        return qa_rows(rag, dataset, args.qa, [m for m in args.qa_modes.split(",") if m])
    finally:
        rag.close()


def _twowiki(args, encoder) -> dict:
    """Recall of every mode on a copy of a 2Wiki ner index."""
    from hippo_engine import HippoRAG
    from hippo_engine.evaluation.datasets import load_dataset

    ds = load_dataset(args.twowiki_data).head(args.twowiki_limit)
    work = args.work / "2wiki-ner" / "index"
    if not (work / "hippo-index.json").exists():
        shutil.copytree(args.twowiki_index, work, ignore=shutil.ignore_patterns("write.lock*"), dirs_exist_ok=True)
    rag = HippoRAG(work, llm=ForbiddenLLM(), encoder=encoder, show_progress=False, use_filter=False)
    try:
        comm = _communities(rag)
        print(f"2Wiki ner: {comm['communities']} communities ({comm['seconds']:.0f} s)")
        return {"dataset": "2Wiki", "variant": "ner", "questions": len(ds), "comm": comm,
                "rows": recall_rows(rag, ds, MODES)}
    finally:
        rag.close()


def _markdown(results: list[dict], argv: Sequence[str], load_before: str, load_after: str, args) -> str:
    shown, skip = [], False      # folder options are paths of the machine the run was made on
    for a in argv[1:] if argv[:1] == ["table-modes"] else argv:
        if skip:
            skip = False
        elif a in FOLDER_OPTIONS:
            skip = True
        elif not a.startswith(tuple(f"{o}=" for o in FOLDER_OPTIONS)):
            shown.append(a)
    lines = ["# Every retrieval mode: Recall@2/@5, F1, LLM calls (issue 25)", "",
             "```bash", "python -m reproduce table-modes " + " ".join(shown), "```", "",
             f"Engine commit: `{engine_commit()}`. Machine: {machine()}.",
             f"Load (`uptime`) before: `{load_before}`; after: `{load_after}`.", "",
             "Default embedder, recognition filter off, communities built once per index without an LLM "
             "(member listings as reports: `build_communities(max_llm_reports=0)`). Retrieval ran with an LLM "
             "that fails on any call: the `LLM calls` column counts calls made while retrieving (0 for every mode).",
             ""]
    for r in results:
        c = r["comm"]
        lines += [f"## {r['dataset']} ({r['questions']} questions), index `{r['variant']}`", "",
                  f"{c['communities']:,} communities (levels {c['levels']}), built in {c['seconds']:.0f} s.", "",
                  "| mode | R@2 | R@5 | LLM calls | retrieval s | top-20 hash |",
                  "| --- | --- | --- | --- | --- | --- |"]
        for mode, row in r["rows"].items():
            ref = REFERENCE.get(r["variant"]) if mode == "hipporag2" and r["dataset"] == "MuSiQue" else None
            mark = "" if ref is None else (" (= reference)" if row["hash"] == ref else f" (reference `{ref}`!)")
            lines.append(f"| {mode} | {row['recall'][2]:.1f} | {row['recall'][5]:.1f} | {row['llm_calls']} | "
                         f"{row['seconds']:.1f} | `{row['hash']}`{mark} |")
        lines.append("")
        if "qa" in r:
            lines += [f"QA on the first {args.qa} questions, packaged reader, LLM `{args.llm or 'default local'}`:", "",
                      "| mode | EM | F1 | LLM calls / query | tokens / query | seconds | errors |",
                      "| --- | --- | --- | --- | --- | --- | --- |"]
            for mode, q in r["qa"].items():
                lines.append(f"| {mode} | {q['em']:.1f} | {q['f1']:.1f} | {q['calls']:.1f} | {q['tokens']:.0f} | "
                             f"{q['seconds']:.0f} | {q['errors']} |")
            lines.append("")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    from .common import module_main
    sys.exit(module_main(sys.modules[__name__]))
