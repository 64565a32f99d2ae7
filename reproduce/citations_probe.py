"""The few-shot leak probe (issue 22): questions whose answers are in no indexed passage.

    python -m reproduce citations --probe [--work DIR] [--out FILE]

A new user reported the packaged reader answering "Kessingford" (the answer of the reader prompt's
worked example) to a question its memory could not answer. On the first 20 MuSiQue questions and on
the bundled sample the old prompt gave the example's answer 0 times (``README.md`` beside this file's
result), so this probe asks questions the bundled sample corpus cannot answer, the situation of that
report: three about server administration (as the reported one) and the worked example's own question
(its passages are not in the corpus). Each is retrieved on the sample's ``extractor="ner"`` index and
read by the packaged reader with the old prompt (``before``: ``parse_answer`` alone) and today's two
prompts (``plain``, ``cite``: grounded). Reported per answer: the text, its citations and the
grounding notes; per reader the number of answers equal to the example's answer.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from .common import RESULTS_DIR, ForbiddenLLM, engine_commit, machine, uptime, write_result

OUT = RESULTS_DIR / "citations" / "probe.md"
QUESTIONS = (
    "How can I ban IP addresses after repeated failed SSH logins?",
    "Which command restarts the nginx service on Debian?",
    "What port does PostgreSQL listen on by default?",
    "In which town was the designer of Harrowgate Tidal Mill born?",   # the worked example's own question
)


def probe_solutions(work: Path) -> list:
    """The probe questions retrieved on the bundled sample's ``extractor="ner"`` index."""
    import json
    from importlib import resources

    from hippo_engine import HippoRAG

    data = json.loads(resources.files("hippo_engine").joinpath("data/sample_corpus.json").read_text("utf-8"))
    rag = HippoRAG(work / "sample-ner", extractor="ner", llm=ForbiddenLLM(), show_progress=False)
    try:
        rag.index([f"{d['title']}\n{d['text']}" for d in data["corpus"]])
        return rag.retrieve(list(QUESTIONS))
    finally:
        rag.close()


def markdown(rows: list[tuple[str, list]], command: str, commit: str, load: tuple[str, str]) -> str:
    """The probe's answers per reader, and the leak counts."""
    from hippo_engine.evaluation.metrics import normalize_answer

    from .citations_bench import EXAMPLE_ANSWER

    lines = ["# Few-shot leak probe (issue 22)", "", __doc__.split("\n\n", 2)[2].strip(), "",
             "```bash", command, "```", "", f"Engine commit: `{commit}`. Machine: {machine()}.", "",
             f"Load (`uptime`) before: `{load[0]}`; after: `{load[1]}`.", "",
             "| reader | question | answer | citations | grounding notes |", "| --- | --- | --- | --- | --- |"]
    for reader, sols in rows:
        for s in sols:
            notes = "; ".join(s.answer_notes) or "-"
            lines.append(f"| {reader} | {s.question} | {s.answer!r} | {len(s.citations)} | {notes} |")
    lines += ["", "| reader | answers equal to the example's `Kessingford` |", "| --- | --- |"]
    for reader, sols in rows:
        n = sum(normalize_answer(s.answer or "") == normalize_answer(EXAMPLE_ANSWER) for s in sols)
        lines.append(f"| {reader} | {n} of {len(sols)} |")
    return "\n".join(lines) + "\n"


def run_probe(args: argparse.Namespace) -> int:
    """Retrieve the probe questions, read them with every reader (packaged LLM), write the markdown."""
    from .citations_bench import READERS, _packaged_reader, read

    commit, load_before = engine_commit(), uptime()
    sols = probe_solutions(args.work)
    llm = _packaged_reader()
    rows = []
    for reader in READERS:
        answered, secs = read(llm, sols, reader)
        print(f"{reader}: {[s.answer for s in answered]} ({secs:.0f} s)", flush=True)
        rows.append((reader, answered))
    out = args.out if args.out != RESULTS_DIR / "citations" / "README.md" else OUT
    print(write_result(out, markdown(rows, "python -m reproduce citations --probe --work <work dir>",
                                     commit, (load_before, uptime()))))
    return 0
