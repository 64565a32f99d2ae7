"""Citations and grounded answers (issue 22): the reader on the first 20 MuSiQue questions and the
bundled sample corpus.

    python -m reproduce citations [--limit 20] [--work DIR] [--data DIR] [--out FILE] [--skip-local]

The MuSiQue questions are retrieved once on the ``rankings`` command's openie index (released
OpenIE, filter off, no LLM; ``<work>/openie/index``, built when missing); the sample corpus is
indexed with ``extractor="ner"`` (no LLM) under ``<work>/sample-ner``. Every reader sees the same
top 5 passages. Readers:

* ``before``: the reader prompt before issue 22 (``reproduce/citations_before.json``), parsed with
  ``parse_answer`` alone: how often the answer is the worked example's (``Kessingford``);
* ``plain``: today's prompt without citations (``ReaderTemplate.without_citations()``), grounded;
* ``cite``: today's default reader: numbered passages, citations, grounded;

each with (a) the packaged reader (``llm_backend`` auto) and (b) a scripted OpenAI-compatible
server on 127.0.0.1 (:mod:`.citations_server`). Reported per reader: the share of answers with at
least one valid citation, the share of citations that point at a gold passage, invalid citations
dropped, EM/F1, and for ``cite`` minus ``plain`` the per-question paired F1 differences with a
bootstrap 95% interval over the questions (noise).
"""
from __future__ import annotations

import argparse
import copy
import random
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from .common import (
    RESULTS_DIR,
    ForbiddenLLM,
    engine_commit,
    machine,
    setup_logging,
    uptime,
    write_result,
)
from .harness import option
from .rankings import _runner_args

OUT = RESULTS_DIR / "citations" / "README.md"
BEFORE_PROMPT = Path(__file__).with_name("citations_before.json")
EXAMPLE_ANSWER = "Kessingford"
READERS = ("before", "plain", "cite")


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The ``citations`` command's options."""
    option(ap, "--limit", default=20, help="first N MuSiQue questions (default 20)")
    option(ap, "--work", help="index folders, the rankings command's layout (default %(default)s)")
    option(ap, "--data")
    option(ap, "--out", default=OUT, help="result markdown (default %(default)s)")
    ap.add_argument("--skip-local", action="store_true", help="only the scripted server (no packaged reader)")
    ap.add_argument("--probe", action="store_true",
                    help="only the few-shot leak probe: questions the sample cannot answer (citations_probe.py)")
    option(ap, "--embedder")
    option(ap, "--verbose")


# ----------------------------------------------------------------------------- questions
def musique_solutions(args: argparse.Namespace, dataset) -> list:
    """The first questions retrieved on the openie rankings index (built when missing)."""
    from .tables.methods import hippo_method
    from .tables.runner import Runner

    runner = Runner(_runner_args(args, "openie"), dataset, [], llm=ForbiddenLLM(), extractor="openie")
    try:
        runner.prepare_index()
        rag = runner.open(hippo_method(False))
        try:
            return rag.retrieve(list(dataset.questions))
        finally:
            rag.close()
    finally:
        runner.close()


def sample_solutions(work: Path) -> tuple[list, list, list]:
    """The bundled sample's questions retrieved on an ``extractor="ner"`` index; gold docs and answers."""
    import json
    from importlib import resources

    from hippo_engine import HippoRAG

    data = json.loads(resources.files("hippo_engine").joinpath("data/sample_corpus.json").read_text("utf-8"))
    by_title = {d["title"]: f"{d['title']}\n{d['text']}" for d in data["corpus"]}
    rag = HippoRAG(work / "sample-ner", extractor="ner", llm=ForbiddenLLM(), show_progress=False)
    try:
        rag.index(list(by_title.values()))
        sols = rag.retrieve([q["question"] for q in data["questions"]])
    finally:
        rag.close()
    return (sols, [[by_title[t] for t in q["supporting_titles"]] for q in data["questions"]],
            [q["answers"] for q in data["questions"]])


# ----------------------------------------------------------------------------- reading
def read(llm, solutions: Sequence, reader: str, k: int = 5) -> tuple[list, float]:
    """Copies of ``solutions`` answered by ``reader``; seconds taken."""
    import json

    from hippo_engine.qa.reader import answer_questions, default_reader_template, parse_answer

    sols = copy.deepcopy(list(solutions))
    t = time.perf_counter()
    if reader == "before":
        template = json.loads(BEFORE_PROMPT.read_text("utf-8"))
        responses, _ = answer_questions(llm, sols, k, template=template)
        for s, r in zip(sols, responses, strict=True):      # the parsing of the time: no cut, no check
            s.answer, s.citations, s.answer_notes = parse_answer(r), [], []
    else:
        template = default_reader_template(cite=reader == "cite")
        answer_questions(llm, sols, k, template=template)
    return sols, time.perf_counter() - t


def score(sols: Sequence, gold_docs: Sequence, gold_answers: Sequence) -> dict:
    """Citation shares, leaks, EM/F1 (means and per question)."""
    from hippo_engine.evaluation.metrics import normalize_answer, qa_metrics_per_query

    per = qa_metrics_per_query([s.answer or "" for s in sols], gold_answers)
    cited = [c for s in sols for c in s.citations]
    gold_ids = [{_pid(d) for d in g} for g in gold_docs]
    on_gold = sum(c in g for s, g in zip(sols, gold_ids, strict=True) for c in s.citations)
    n = len(sols)
    return {"n": n, "with_citation": sum(bool(s.citations) for s in sols) / n,
            "citations": len(cited), "gold_share": on_gold / len(cited) if cited else float("nan"),
            "invalid": sum(s.invalid_citations for s in sols),
            "leaks": sum(normalize_answer(s.answer or "") == normalize_answer(EXAMPLE_ANSWER) for s in sols),
            "rejected": sum(any(n.startswith("rejected") for n in s.answer_notes) for s in sols),
            "cut": sum(any(n.startswith("cut") for n in s.answer_notes) for s in sols),
            "em": [p["ExactMatch"] for p in per], "f1": [p["F1"] for p in per]}


def _pid(doc: str) -> str:
    from hippo_engine.ids import chunk_id
    return chunk_id(doc)


def bootstrap(diffs: Sequence[float], rounds: int = 2000, seed: int = 0) -> tuple[float, float]:
    """95% percentile interval of the mean of ``diffs`` resampled with replacement."""
    rng = random.Random(seed)
    means = sorted(sum(rng.choices(diffs, k=len(diffs))) / len(diffs) for _ in range(rounds))
    return means[int(0.025 * rounds)], means[int(0.975 * rounds) - 1]


# ----------------------------------------------------------------------------- running
def _packaged_reader():
    from hippo_engine.config import HippoConfig
    from hippo_engine.llm import make_llm

    return make_llm(None, HippoConfig())


def _server_reader(base_url: str):
    from hippo_engine.llm.openai_client import OpenAIClient

    return OpenAIClient("scripted-reader", base_url=base_url, api_key="none")


def run_readers(llm, name: str, sets: dict, readers: Sequence[str]) -> list[dict]:
    """Each reader over each question set: one result row per (set, reader)."""
    rows = []
    for set_name, (sols, gold_docs, gold_answers) in sets.items():
        for reader in readers:
            answered, secs = read(llm, sols, reader)
            row = {"llm": name, "set": set_name, "reader": reader, "seconds": secs,
                   **score(answered, gold_docs, gold_answers)}
            print(f"{name} / {set_name} / {reader}: EM {_mean(row['em']):.1f} F1 {_mean(row['f1']):.1f} "
                  f"with citation {100 * row['with_citation']:.0f}% gold share {100 * row['gold_share']:.0f}% "
                  f"leaks {row['leaks']} rejected {row['rejected']} cut {row['cut']} ({secs:.0f} s)", flush=True)
            rows.append(row)
    return rows


def _mean(xs: Sequence[float]) -> float:
    return 100 * sum(xs) / len(xs) if xs else float("nan")


def _pct(x: float) -> str:
    return "n/a" if x != x else f"{100 * x:.0f}%"


def _paired(rows: list[dict]) -> list[str]:
    out = []
    for llm in dict.fromkeys(r["llm"] for r in rows):
        for set_name in dict.fromkeys(r["set"] for r in rows):
            by = {r["reader"]: r for r in rows if r["llm"] == llm and r["set"] == set_name}
            if "cite" in by and "plain" in by:
                d = [a - b for a, b in zip(by["cite"]["f1"], by["plain"]["f1"], strict=True)]
                lo, hi = bootstrap(d)
                changed = sum(abs(x) > 1e-12 for x in d)
                out.append(f"| {llm} | {set_name} | {_mean(d):+.1f} | [{100 * lo:+.1f}, {100 * hi:+.1f}] | "
                           f"{changed} of {len(d)} |")
    return out


def markdown(rows: list[dict], command: str, commit: str, load: tuple[str, str]) -> str:
    lines = ["# Citations and grounded answers (issue 22)", "",
             "First MuSiQue train questions (`../shared/data/musique/hipporag_v1_train/`, retrieved on the "
             "`rankings` openie index: released OpenIE, filter off) and the bundled sample corpus "
             "(`hippo_engine/data/sample_corpus.json`, `extractor=\"ner\"` index). Every reader sees the same "
             "top 5 passages. `before`: the reader prompt before issue 22 with `parse_answer` alone; `plain`: "
             "today's prompt without citations, grounded; `cite`: today's default reader (numbered passages, "
             "citations, grounded). The scripted server answers with the first gold answer and, when the "
             "passages are numbered, cites the shown passages that contain it in a format picked by a hash of "
             "the question (`[1]`, `[1, 3]`, `(2)`, `passage 2`, the passage id), plus one passage that was "
             "not shown (`reproduce/citations_server.py`); its figures repeat run to run. "
             "See `reproduce/citations_bench.py`.", "",
             "```bash", command, "```", "",
             f"Engine commit: `{commit}`. Machine: {machine()}.", "",
             f"Load (`uptime`) before: `{load[0]}`; after: `{load[1]}`.", "",
             "| reader LLM | questions | reader | EM | F1 | answers with a valid citation | citations on a gold "
             "passage | citations (invalid dropped) | answers = example's `Kessingford` | rejected as example "
             "leak | cut | time |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        lines.append(f"| {r['llm']} | {r['set']} ({r['n']}) | {r['reader']} | {_mean(r['em']):.1f} | "
                     f"{_mean(r['f1']):.1f} | {_pct(r['with_citation'])} | {_pct(r['gold_share'])} | "
                     f"{r['citations']} ({r['invalid']}) | {r['leaks']} | {r['rejected']} | {r['cut']} | "
                     f"{r['seconds']:.0f} s |")
    lines += ["", "Noise: F1 of `cite` minus `plain`, per question (paired, same passages), mean and a bootstrap "
              "95% interval of the mean (2,000 resamples of the questions, seed 0).", "",
              "| reader LLM | questions | mean F1 difference | 95% interval | questions that changed |",
              "| --- | --- | --- | --- | --- |", *_paired(rows)]
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace, argv: Sequence[str]) -> int:
    """Retrieve, read with every reader and LLM, write the markdown."""
    from hippo_engine.evaluation.datasets import load_dataset

    from .citations_server import ScriptedReaderServer

    setup_logging(args.verbose)
    if args.probe:
        from .citations_probe import run_probe
        return run_probe(args)
    if not (args.data.is_dir() and any(args.data.glob("*_corpus.json"))):
        print(f"citations: skipped, the MuSiQue subset is not at {args.data}")
        return 0
    commit, load_before = engine_commit(), uptime()
    dataset = load_dataset(args.data).head(args.limit)
    sets = {"MuSiQue": (musique_solutions(args, dataset), dataset.gold_docs, dataset.gold_answers),
            "sample": sample_solutions(args.work)}
    script = {q: list(g) if not isinstance(g, str) else [g] for s in sets.values()
              for q, g in zip([x.question for x in s[0]], s[2], strict=True)}
    with ScriptedReaderServer(script) as srv:
        rows = run_readers(_server_reader(srv.base_url), "scripted server", sets, READERS)
    if not args.skip_local:
        rows += run_readers(_packaged_reader(), "packaged Qwen2.5-Coder-0.5B", sets, READERS)
    shown = [a for a in (argv[1:] if argv[:1] == ["citations"] else argv)
             if not a.startswith(("--work", "--data", "--out", "/"))]
    command = "python -m reproduce citations " + " ".join(shown)
    path = write_result(args.out, markdown(rows, command.strip(), commit, (load_before, uptime())))
    print(path)
    return 0


if __name__ == "__main__":
    from .common import module_main
    sys.exit(module_main(sys.modules[__name__]))
