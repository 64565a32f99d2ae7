"""The results of ``python -m reproduce table-modes`` (issue 25): one JSON part per run piece
(``<dataset>-<variant>.json`` for recall, ``qa-<dataset>-<variant>.json`` for answers) in
``reproduce/results/modes/``, and the README rendered from every part there, so a run of one piece
(2Wiki alone, QA alone) keeps the others' figures. Each part records its own command, engine commit,
wall time and ``uptime`` before and after.
"""
from __future__ import annotations

import json
import shlex
import time
from collections.abc import Sequence
from pathlib import Path

from .common import RESULTS_DIR, engine_commit, machine, uptime, write_result

FOLDER = RESULTS_DIR / "modes"
REFERENCE = {"openie": "11059dbcf6e65b26", "ner": "f6e4b2e08f47bba9"}
FOLDER_OPTIONS = ("--work", "--copy-from", "--data", "--twowiki-index", "--twowiki-data", "--out", "--parts")

#: what each mode does with an LLM when answering (rag_qa); retrieval makes no call in any mode
#: (measured: the LLM calls column of the recall tables)
ANSWERING = {
    "hipporag2": "1 reader call over its top `qa_top_k` passages",
    "naive": "1 reader call over its top `qa_top_k` passages",
    "hi_local": "1 reader call over its assembled context (entities, relations, passages)",
    "hi_global": "1 reader call over its assembled context (community reports, passages)",
    "hi_bridge": "1 reader call over its assembled context (bridge paths, passages)",
    "hi": "1 reader call over its assembled context (local + global + bridge)",
    "graphrag_local": "1 reader call over its context (reports 3,200 / local 4,800 / text units 4,000 tokens)",
    "graphrag_global": "**LLM-bound**: 1 map call per report batch (at most 4) + 1 reduce call when a point "
                       "scored above 0; the answer comes from the LLM's rated points, not from passages",
    "kb_vector": "1 reader call over its top `qa_top_k` passages",
    "kb_graph": "1 reader call over its top `qa_top_k` passages",
    "kb_hybrid": "1 reader call over its top `qa_top_k` passages",
    "kb_global": "1 reader call over its top `qa_top_k` passages",
}


def part_name(entry: dict) -> str:
    """The JSON file name of a part."""
    base = f"{entry['dataset'].lower()}-{entry['variant']}.json"
    return f"qa-{base}" if entry["kind"] == "qa" else base


def shown_command(argv: Sequence[str]) -> str:
    """The command line with ``DIR`` for the folders (paths of the machine the run was made on)."""
    shown, skip = [], False
    for a in argv[1:] if argv[:1] == ["table-modes"] else argv:
        if skip:
            skip = False
        elif a in FOLDER_OPTIONS:
            shown.append(f"{a} DIR")
            skip = True
        elif a.startswith(tuple(f"{o}=" for o in FOLDER_OPTIONS)):
            shown.append(a.split("=", 1)[0] + " DIR")
        else:
            shown.append(a)
    return "python -m reproduce table-modes " + " ".join(a if a.endswith(" DIR") else shlex.quote(a) for a in shown)


def write_readme(folder: Path, out: Path | None = None) -> Path:
    """Render ``folder``'s parts and its ``notes.md`` into ``out`` (default ``folder/README.md``)."""
    notes = Path(folder) / "notes.md"
    text = render(load_parts(folder), notes.read_text(encoding="utf-8") if notes.exists() else "")
    return write_result(out or Path(folder) / "README.md", text)


def stamp(argv: Sequence[str], entry: dict, t0: float, load_before: str) -> dict:
    """``entry`` with the run's command, engine commit, machine, wall time since ``t0`` and load."""
    return {**entry, "command": shown_command(argv), "commit": engine_commit(), "machine": machine(),
            "wall_s": time.perf_counter() - t0, "load_before": load_before, "load_after": uptime()}


def save_part(folder: Path, entry: dict) -> Path:
    """Write one part (recall keys ``k`` become strings in JSON; :func:`load_parts` turns them back)."""
    return write_result(Path(folder) / part_name(entry), json.dumps(entry, indent=1) + "\n")


def load_parts(folder: Path) -> list[dict]:
    """Every part in ``folder``: recall parts (MuSiQue first), then QA parts."""
    parts = []
    for p in sorted(Path(folder).glob("*.json")):
        try:
            e = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise SystemExit(f"table-modes: cannot read the result part {p}: {exc}") from exc
        for row in e.get("rows", {}).values():
            for key in ("recall", "recall_sample"):
                if key in row:
                    row[key] = {int(k): v for k, v in row[key].items()}
        parts.append(e)
    order = {"MuSiQue": 0, "2Wiki": 1}
    return sorted(parts, key=lambda e: (e["kind"] == "qa", order.get(e["dataset"], 2), e["variant"] != "openie"))


def _header(e: dict) -> list[str]:
    return ["```bash", e["command"], "```", "",
            f"Engine commit `{e['commit']}`; wall {e['wall_s']:.0f} s; load (`uptime`) before: `{e['load_before']}`; "
            f"after: `{e['load_after']}`.", ""]


def recall_section(e: dict) -> list[str]:
    """One recall part as markdown."""
    c, n = e["comm"], e["questions"]
    levels = ", ".join(f"{k}: {v:,}" for k, v in c["levels"].items())
    counts = [q.get("questions", e["questions"]) for q in e["rows"].values()]
    sample = ({"n": min(counts), "reason": e.get("sample_reason", "slow on this machine")}
              if counts and min(counts) < e["questions"] else None)
    lines = [f"## {e['dataset']} ({n:,} questions, {e['passages']:,} passages), index `{e['variant']}`", "",
             *_header(e),
             f"{c['communities']:,} communities (per level: {levels}), "
             + (f"built in {c['seconds']:.0f} s." if c.get("built") else "already built."),
             ""]
    if sample:
        lines += [f"Modes marked * ran on the first {sample['n']:,} questions only ({sample['reason']}); for "
                  f"comparison every row shows Recall@2/@5 on those {sample['n']:,} questions too.", ""]
        lines += [f"| mode | questions | R@2 | R@5 | R@2 (first {sample['n']}) | R@5 (first {sample['n']}) | "
                  "LLM calls | s / question | top-20 hash |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    else:
        lines += ["| mode | R@2 | R@5 | LLM calls | s / question | top-20 hash |",
                  "| --- | --- | --- | --- | --- | --- |"]
    for mode, row in e["rows"].items():
        ref = REFERENCE.get(e["variant"]) if mode == "hipporag2" and e["dataset"] == "MuSiQue" else None
        mark = "" if ref is None else (" (= reference)" if row["hash"] == ref else f" (reference `{ref}`!)")
        per_q = row["seconds"] / max(row["questions"], 1)
        if sample:
            part = row["questions"] < n
            full = ("-", "-") if part else (f"{row['recall'][2]:.1f}", f"{row['recall'][5]:.1f}")
            rs = row.get("recall_sample", row["recall"])
            lines.append(f"| {mode}{' *' if part else ''} | {row['questions']:,} | {full[0]} | {full[1]} | "
                         f"{rs[2]:.1f} | {rs[5]:.1f} | {row['llm_calls']} | {per_q:.2f} | `{row['hash']}` |")
        else:
            lines.append(f"| {mode} | {row['recall'][2]:.1f} | {row['recall'][5]:.1f} | {row['llm_calls']} | "
                         f"{per_q:.2f} | `{row['hash']}`{mark} |")
    if any(m.endswith("(auto)") for m in e["rows"]):
        lines += ["", "`hipporag2`: the paper's one walk (`second_hop=\"none\"`, `dense_agree=0`, `dense_weight=0`, "
                  "as the `rankings` "
                  "reference); `hipporag2 (auto)`: the engine's defaults on this index (`\"auto\"` resolves to "
                  "`second_hop=\"wide\"` and one score of three terms on a `ner` index, `hippo_engine/auto.py`)."]
    return lines + [""]


def qa_section(e: dict) -> list[str]:
    """One QA part as markdown: EM/F1, LLM calls and tokens per query, and what makes them."""
    lines = [f"## QA: the first {e['questions']} {e['dataset']} questions, index `{e['variant']}`, "
             f"reader LLM `{e['llm']}` ({e['llm_client']})", ""]
    for s in e["sessions"]:
        lines += ["```bash", s["command"], "```", "", _session_line(s, e["machine"]), ""]
    going = {m: len(st.get("answers", [])) for m, st in e.get("partial", {}).items() if st.get("answers")}
    if going:
        lines += ["In progress (answered questions saved; a later run with the same command continues from the "
                  "next): " + ", ".join(f"{m} {k} of {e['questions']}" for m, k in going.items()) + ".", ""]
    counts = [q.get("questions", e["questions"]) for q in e["rows"].values()]
    sample = ({"n": min(counts), "reason": e.get("sample_reason", "slow on this machine")}
              if counts and min(counts) < e["questions"] else None)
    lines += [f"Packaged reader prompt, top {e['qa_top_k']} passages for the passage modes, recognition filter off, "
              "LLM response cache off (every call made).", ""]
    head = ["mode", "questions", "EM", "F1"]
    if sample:
        lines += [f"Modes marked * answered only the first questions, as many as the `questions` column says "
                  f"({sample['reason']}); every row also shows EM/F1 on the first {sample['n']}.", ""]
        head += [f"EM (first {sample['n']})", f"F1 (first {sample['n']})"]
    head += ["LLM calls / query", "prompt tokens / query", "completion tokens / query", "s / query", "errors",
             "LLM use when answering"]
    lines += ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for mode in [m for m in ANSWERING if m in e["rows"]] + [m for m in e["rows"] if m not in ANSWERING]:
        q = e["rows"][mode]
        n = q.get("questions", e["questions"])
        cells = [f"{mode}{' *' if n < e['questions'] else ''}", str(n), f"{q['em']:.1f}", f"{q['f1']:.1f}"]
        if sample:
            em, f1 = _scores(q["answers"][:sample["n"]], e["gold_answers"][:sample["n"]])
            cells += [f"{em:.1f}", f"{f1:.1f}"]
        cells += [f"{q['calls']:.2f}", f"{q['prompt_tokens']:.0f}", f"{q['completion_tokens']:.0f}",
                  f"{q['seconds'] / n:.0f}", str(q["errors"]), ANSWERING.get(mode, "") + _cut_note(q, n)]
        lines.append("| " + " | ".join(cells) + " |")
    if e.get("contexts"):
        lines += ["", f"What each mode gives the reader for these {e['questions']} questions, measured without an LLM "
                  "call (`retrieve_context`; the passage modes: their top `qa_top_k` passages as `rag_qa` reads them): "
                  "context tokens per query by the engine's token counter (prompt template not counted).", "",
                  "| mode | context tokens / query (mean) | max | sections (mean tokens) | map batches / query |",
                  "| --- | --- | --- | --- | --- |"]
        for mode, c in e["contexts"].items():
            secs = ", ".join(f"{k} {v:,.0f}" for k, v in c["sections"].items())
            nb = f"{c['batches_mean']:.2f} (max {c['batches_max']})" if "batches_mean" in c else ""
            lines.append(f"| {mode} | {c['mean']:,.0f} | {c['max']:,} | {secs} | {nb} |")
    errors = {m: q["error_messages"] for m, q in e["rows"].items() if q.get("error_messages")}
    if errors:
        lines += ["", "Errors (distinct messages):", ""]
        lines += [f"* `{m}`: " + "; ".join(f"`{x}`" for x in msgs) for m, msgs in errors.items()]
    return lines + [""]


def _session_line(s: dict, machine: str) -> str:
    """What one QA session did: the modes it finished, the engine, threads, wall time and load (and its
    machine when not the file's ``machine``); a session still running, or stopped before its first mode
    finished, says so instead of a wall time of 0."""
    head = (f"Modes finished: {', '.join(s.get('done', s['modes'])) or 'none'}; engine commit `{s['commit']}`; "
            + (f"machine: {s['machine']}; " if s.get("machine", machine) != machine else "")
            + (f"LLM threads: {s['llm_threads']}; " if s.get("llm_threads") else ""))
    if "wall_s" not in s:
        return head + (f"load (`uptime`) at its start: `{s['load_before']}`; stopped or still running before a "
                       "mode finished.")
    return head + (f"wall {s['wall_s']:.0f} s; load (`uptime`) before: `{s['load_before']}`; after: "
                   f"`{s.get('load_after', '?')}`.")


def _scores(answers: Sequence[str | None], gold: Sequence[Sequence[str]]) -> tuple[float, float]:
    """EM and F1 (%) of ``answers`` (the engine's metrics)."""
    from hippo_engine.evaluation.metrics import qa_metrics

    m = qa_metrics([a or "" for a in answers], [list(g) for g in gold])
    return 100 * m["ExactMatch"], 100 * m["F1"]


INTRO = ("Default embedder, recognition filter off, communities built once per index without an LLM (member "
         "listings as reports: `build_communities(max_llm_reports=0)`). Retrieval runs with an LLM that fails on any "
         "call: the `LLM calls` column counts calls made while retrieving. Notes on the figures: `notes.md` "
         "(appended below).")


def render(parts: list[dict], notes: str = "") -> str:
    """The README from the parts and the hand-written ``notes``."""
    lines = ["# Every retrieval mode: Recall@2/@5, F1, LLM calls and tokens (issue 25)", "", INTRO, ""]
    machines = sorted({e["machine"] for e in parts})
    lines += [f"Machine: {m}." for m in machines] + [""]
    for e in parts:
        lines += qa_section(e) if e["kind"] == "qa" else recall_section(e)
    lines += [notes] if notes else []
    return "\n".join(lines).rstrip() + "\n"


def _cut_note(q: dict, n: int) -> str:
    """Says in how many questions the reader's context was cut to the model's window (qa/fit.py)."""
    cut = q.get("contexts_cut")
    return f"; context cut to the reader's window in {cut} of {n} questions" if cut else ""
