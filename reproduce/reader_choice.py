"""Which packaged reader, and does it answer briefly (issue 39, item 4)?

    python -m reproduce reader-choice --label after [--llm NAME ...] [--sets sample musique packages]
    python -m reproduce reader-choice --report

Each run answers one question set (see :mod:`.reader_choice_data`: the sample corpus, the first 20
MuSiQue train questions, the Debian package descriptions of ``/var/lib/dpkg/status``) with one packaged
reader, one question at a time (timed each), the way ``rag_qa`` calls the reader (top 5 passages, the
configuration's ``max_new_tokens`` and temperature), and writes
``reproduce/results/qa/reader_choice/<label>__<reader>__<set>.json``: per question the answer, its notes,
the raw reply, the finish reason and seconds, and the load (``uptime``) before and after (saved after
each question; ``--minutes`` bounds a run). ``--rescore LABEL`` re-reads saved replies with this
checkout's answer checks (no LLM call). ``--report``
joins every such file into ``reproduce/results/qa/reader_choice.md`` and ``reader_choice.json``: per
label, reader and set EM, F1, the share of the model's answers over 20 words, the share of fragment
answers and seconds per answer. A set whose data is missing is skipped with a message.
"""
from __future__ import annotations

import argparse
import copy
import json
import statistics
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
from .reader_choice_data import DPKG_STATUS, dpkg_documents, fragment, package_questions, words

OUT_DIR = RESULTS_DIR / "qa"
RUNS = OUT_DIR / "reader_choice"
#: how the saved runs were made (written into the report)
RUN_NOTE = ("Runs in this report: `python -m reproduce reader-choice --label before|after --llm <reader> --sets <set> "
            "--limit 10 --minutes 12..22` (MuSiQue: the first 10 questions, not 20, and fewer where a run's time bound "
            "ended it: the shared 2-core machine ran at a load of 1 to 7, so seconds per answer carry that noise; "
            "llama.cpp took 1 thread under that load). `before`: commit b66e7f3 (reader prompt, checks and llama.cpp "
            "client as at 6a06d2e, where the issue was filed); `after`: this issue's reader; after-runs made before "
            "the last answer-check commits were re-read with `--rescore after` (no reply needed the follow-up turn "
            "added later, so the figures are those of the final code). Empty answers carry a note saying why.")
READERS = ("Qwen2.5-Coder-0.5B-Instruct", "Qwen2.5-Coder-1.5B-Instruct")
SETS = ("sample", "musique", "packages")


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The ``reader-choice`` command's options."""
    ap.add_argument("--label", default="after", help="names the code state measured (e.g. before, after)")
    ap.add_argument("--llm", action="append", choices=READERS, help="packaged reader (repeatable; default both)")
    ap.add_argument("--sets", nargs="+", choices=SETS, default=list(SETS), help="question sets (default all)")
    option(ap, "--limit", default=20, help="first N MuSiQue questions (default 20)")
    ap.add_argument("--packages", type=int, default=1500, help="at most N packages of the status file")
    ap.add_argument("--status", type=Path, default=DPKG_STATUS, help="dpkg status file (default %(default)s)")
    option(ap, "--work", help="index folders (the rankings command's layout; default %(default)s)")
    option(ap, "--data")
    option(ap, "--minutes", default=25,
           help="start no question after this many minutes of reading (default %(default)s)")
    ap.add_argument("--report", action="store_true", help="only join the saved runs into the markdown and json")
    ap.add_argument("--rescore", metavar="LABEL", help="re-read the saved replies of LABEL's runs with this "
                    "checkout's answer checks (no LLM call), then report")
    option(ap, "--embedder")
    option(ap, "--verbose")


# ----------------------------------------------------------------------------- question sets
def _ner_solutions(folder: Path, docs: Sequence[str], questions: Sequence[str]) -> list:
    """``questions`` retrieved on an ``extractor="ner"`` index of ``docs`` (no LLM call)."""
    from hippo_engine import HippoRAG

    rag = HippoRAG(folder, extractor="ner", llm=ForbiddenLLM(), show_progress=False)
    try:
        rag.index(list(docs))
        return rag.retrieve(list(questions))
    finally:
        rag.close()


def question_set(name: str, args: argparse.Namespace) -> tuple[list, list] | None:
    """``(solutions, gold answers)`` of one set, or None (with a message) when its data is missing."""
    if name == "sample":
        from .citations_bench import sample_solutions
        sols, _, gold = sample_solutions(args.work)
        return sols, gold
    if name == "musique":
        from hippo_engine.evaluation.datasets import load_dataset

        from .citations_bench import musique_solutions
        if not (args.data.is_dir() and any(args.data.glob("*_corpus.json"))):
            print(f"reader-choice: musique skipped, the MuSiQue subset is not at {args.data}")
            return None
        dataset = load_dataset(args.data).head(args.limit)
        return musique_solutions(args, dataset), list(dataset.gold_answers)
    if not args.status.is_file():
        print(f"reader-choice: packages skipped, no dpkg status file at {args.status}")
        return None
    docs = dpkg_documents(args.status, args.packages)
    questions, gold = package_questions()
    print(f"reader-choice: packages corpus: {len(docs)} package descriptions from {args.status}")
    return _ner_solutions(args.work / f"packages-ner-{len(docs)}", docs, questions), gold


# ----------------------------------------------------------------------------- reading
def read_set(llm, solutions: Sequence, gold: Sequence, save=None, deadline: float = float("inf")) -> list[dict]:
    """Answer each question alone (timed), the way ``rag_qa`` calls the reader; one row per question,
    passed to ``save(rows)`` after each; no question is started after ``deadline`` (``time.monotonic()``)."""
    from hippo_engine.config import HippoConfig
    from hippo_engine.evaluation.metrics import qa_metrics_per_query
    from hippo_engine.qa.citations import strip_citations
    from hippo_engine.qa.reader import answer_questions, parse_answer

    cfg = HippoConfig()
    rows = []
    for sol, answers in zip(solutions, gold, strict=True):
        if time.monotonic() > deadline:
            print(f"reader-choice: time is up after {len(rows)} of {len(solutions)} questions", flush=True)
            break
        s = copy.deepcopy(sol)
        t = time.perf_counter()
        responses, meta = answer_questions(llm, [s], cfg.qa_top_k, max_new_tokens=cfg.max_new_tokens,
                                           temperature=cfg.temperature)
        secs = time.perf_counter() - t
        reply, finish = responses[0], meta[0]["finish_reason"]
        m = qa_metrics_per_query([s.answer or ""], [list(answers)])[0]
        rows.append({"question": s.question, "gold": list(answers), "answer": s.answer or "",
                     "notes": list(getattr(s, "answer_notes", []) or []), "reply": reply, "finish_reason": finish,
                     "completion_tokens": meta[0]["completion_tokens"], "seconds": round(secs, 2),
                     "model_answer_words": words(strip_citations(parse_answer(reply))),
                     "fragment": fragment(s.answer or "", reply, finish),
                     "em": m["ExactMatch"], "f1": m["F1"],
                     "top5_titles": [d.split("\n", 1)[0] for d in s.docs[:cfg.qa_top_k]]})
        print(f"  {secs:5.1f} s  EM {m['ExactMatch']:.0f}  {s.question[:60]!r} -> {s.answer!r} "
              f"{'FRAGMENT ' if rows[-1]['fragment'] else ''}{rows[-1]['notes']}", flush=True)
        if save is not None:
            save(rows)
    return rows


def run_one(args: argparse.Namespace, reader: str, set_name: str, data: tuple[list, list]) -> Path:
    """One reader over one set; the saved run's path."""
    from hippo_engine.config import HippoConfig
    from hippo_engine.llm import make_llm

    llm = make_llm(reader, HippoConfig())
    llm.load()
    path = RUNS / f"{args.label}__{reader}__{set_name}.json"
    run = {"label": args.label, "reader": reader, "set": set_name, "commit": common.engine_commit(),
           "machine": common.machine(), "threads": getattr(llm, "num_threads", None), "uptime_before": common.uptime()}

    def save(rows: list[dict]) -> None:
        write_result(path, json.dumps({**run, "uptime_after": common.uptime(), "rows": rows}, indent=1,
                                      ensure_ascii=False) + "\n")

    rows = read_set(llm, *data, save=save, deadline=time.monotonic() + 60 * args.minutes)
    print(f"reader-choice: {args.label} / {reader} / {set_name}: {summary(rows)} -> {path}", flush=True)
    return path


def rescore(label: str) -> int:
    """Re-read the saved replies of ``label``'s runs with this checkout's answer checks (``read_reply``;
    no LLM call: valid while the prompt, hence each reply, is unchanged). The worked-example check keeps
    its saved verdict (the passages shown are not saved)."""
    from hippo_engine.datatypes import QuerySolution
    from hippo_engine.evaluation.metrics import qa_metrics_per_query
    from hippo_engine.qa.reader import default_reader_template, read_reply

    template, commit = default_reader_template(), common.engine_commit()
    for path in sorted(RUNS.glob(f"{label}__*.json")):
        run = json.loads(path.read_text("utf-8"))
        for r in run["rows"]:
            if any("worked example" in n for n in r["notes"]):
                continue
            sol = QuerySolution(r["question"], [], [])
            read_reply(sol, r["reply"], [r["reply"]], template, finish_reason=r["finish_reason"])
            m = qa_metrics_per_query([sol.answer], [r["gold"]])[0]
            r.update(answer=sol.answer, notes=sol.answer_notes, em=m["ExactMatch"], f1=m["F1"],
                     fragment=fragment(sol.answer, r["reply"], r["finish_reason"]))
        run["rescored_at"] = commit
        write_result(path, json.dumps(run, indent=1, ensure_ascii=False) + "\n")
        print(f"reader-choice: rescored {path.name} at {commit}: {summary(run['rows'])}")
    return 0


# ----------------------------------------------------------------------------- report
def summary(rows: Sequence[dict]) -> dict:
    """EM, F1 (0-100), shares of the model's answers over 20 words and of fragments, seconds per answer."""
    n = len(rows) or 1
    return {"n": len(rows), "em": round(100 * sum(r["em"] for r in rows) / n, 1),
            "f1": round(100 * sum(r["f1"] for r in rows) / n, 1),
            "over_20_words": round(sum(r["model_answer_words"] > 20 for r in rows) / n, 3),
            "fragments": round(sum(r["fragment"] for r in rows) / n, 3),
            "empty": round(sum(not r["answer"] for r in rows) / n, 3),
            "seconds_per_answer": round(sum(r["seconds"] for r in rows) / n, 1),
            "median_seconds": round(statistics.median([r["seconds"] for r in rows]), 1) if rows else None}


def report() -> int:
    """Join the saved runs into ``reader_choice.md`` and ``reader_choice.json``."""
    runs = [json.loads(p.read_text("utf-8")) for p in sorted(RUNS.glob("*.json"))]
    if not runs:
        print(f"reader-choice: no saved runs under {RUNS}")
        return 1
    table = [{k: r[k] for k in ("label", "reader", "set", "commit", "threads", "uptime_before", "uptime_after")}
             | {"rescored_at": r.get("rescored_at")} | summary(r["rows"]) for r in runs]
    write_result(OUT_DIR / "reader_choice.json", json.dumps(table, indent=1) + "\n")
    lines = ["# Reader choice: brief answers, no fragments (issue 39, item 4)", "",
             (__doc__ or "").split("\n\n", 2)[2].strip(), "", f"Machine: {runs[0]['machine']}.", "", RUN_NOTE, "",
             "| code | reader | questions | EM | F1 | model's answer > 20 words | fragments | empty | s/answer "
             "(median) | threads | commit | load before -> after |", "| --- " * 12 + "|"]
    for t in table:
        lines.append(f"| {t['label']} | {t['reader']} | {t['set']} ({t['n']}) | {t['em']:.1f} | {t['f1']:.1f} | "
                     f"{100 * t['over_20_words']:.0f}% | {100 * t['fragments']:.0f}% | {100 * t['empty']:.0f}% | "
                     f"{t['seconds_per_answer']:.1f} ({t['median_seconds']}) | {t['threads']} | `{t['commit']}`"
                     f"{' (answers re-read at `' + t['rescored_at'] + '`)' if t['rescored_at'] else ''} | "
                     f"{_load(t['uptime_before'])} -> {_load(t['uptime_after'])} |")
    write_result(OUT_DIR / "reader_choice.md", "\n".join(lines) + "\n")
    print(OUT_DIR / "reader_choice.md")
    return 0


def _load(line: str) -> str:
    return line.rsplit("load average:", 1)[-1].strip() if line else "?"


def run(args: argparse.Namespace, argv: Sequence[str]) -> int:
    """Run each (reader, set) pair (sets one at a time), or only write the report."""
    setup_logging(args.verbose)
    if args.rescore:
        return rescore(args.rescore) or report()
    if args.report:
        return report()
    for set_name in args.sets:
        data = question_set(set_name, args)
        if data is None:
            continue
        for reader in args.llm or READERS:
            run_one(args, reader, set_name, data)
    return report()


if __name__ == "__main__":
    from .common import module_main
    sys.exit(module_main(sys.modules[__name__]))
