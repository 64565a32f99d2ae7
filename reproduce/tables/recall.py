"""Table 3 (and 9): passage Recall@2/@5, dense retrieval vs HippoRAG 2 (``table-recall``), with
one HippoRAG 2 row per extractor (``--extractor openie,ner``) and rank-fusion rows (``--dense-first N``)."""
from __future__ import annotations

from pathlib import Path

from .methods import Method, dense_method, hippo_method
from .paper import (
    EXTERNAL_NOTE,
    EXTERNAL_RECALL,
    PAPER_ABLATION_R5,
    PAPER_OTHER_DENSE_MUSIQUE_R5,
    PAPER_RECALL,
    paper_column,
)
from .report import curve_table, fmt, llm_label, not_run, pct, require_gold, rows_table
from .results import mean, recall_curve
from .runner import Runner

EXTRACTOR_LABELS = {"ner": 'HippoRAG 2, "ner" index (spaCy, no LLM)', "nary": 'HippoRAG 2, "nary" index'}


def _rows(r: Runner) -> list[tuple[Runner, Method]]:
    """(runner, configuration) per row: dense, then per extractor HippoRAG 2 and its fused variant."""
    out = [(r, dense_method(f"Dense retrieval ({r.embedder_name})"))]
    for x in r.runners:
        base = hippo_method(x.use_filter, label=EXTRACTOR_LABELS.get(x.extractor, "HippoRAG 2"))
        out.append((x, base))
        if r.args.dense_first:
            out.append((x, x.fused(base, key=f"{base.key}+df{r.args.dense_first}")))
    return out


def _paper(col: str | None, x: Runner, m: Method) -> tuple[str, str, str]:
    """The paper's R@2, R@5 and row name for one of our rows (n/a where the paper has none)."""
    if m.dense:
        p = PAPER_RECALL["dense"].get(col) if col else None
        return (fmt(p[0]), fmt(p[1]), "NV-Embed-v2") if p else ("n/a", "n/a", "")
    if x.extractor != "openie" or "dense_first" in m.config:
        return "n/a", "n/a", ""
    if x.use_filter:
        p = PAPER_RECALL["hipporag2"].get(col) if col else None
        return (fmt(p[0]), fmt(p[1]), "HippoRAG 2") if p else ("n/a", "n/a", "")
    p5 = PAPER_ABLATION_R5["no_filter"].get(col) if col else None
    return "n/a", fmt(p5), "HippoRAG 2 w/o filter (Table 4)" if p5 else ""


def table_recall(r: Runner) -> Path:
    """Passage Recall@2/@5, dense retrieval vs HippoRAG 2 (paper Tables 3 and 9)."""
    require_gold(r.ds)
    col = paper_column(r.ds.name)
    res = [(x, m, x.retrieval(m)) for x, m in _rows(r)]
    curves = {m.label: (recall_curve(e, r.ks()) if e else None) for _, m, e in res}
    rows = []
    for x, m, e in res:
        c = curves[m.label]
        paper = _paper(col, x, m)
        fb = (f"{100.0 * sum(y['fallback'] for y in e) / len(e):.0f}%" if e and not m.dense else "")
        sq = fmt(mean([y["s"] for y in e]), 3) if e else "n/a"
        rows.append([m.label, pct(c[2]) if c else not_run(m), pct(c[5]) if c else "", *paper, fb, sq])
    used = [e for _, _, e in res if e]
    lines = r.header("Passage recall: dense retrieval vs HippoRAG 2", "Table 3 (and Table 9)",
                     llm_label(r.llm_name, any(x.use_filter for x in r.runners)), used)
    lines += ["## Recall@2 / Recall@5 (%)", ""]
    lines += rows_table(["method", "R@2", "R@5", "paper R@2", "paper R@5", "paper row", "dense fallback",
                          "s / question"], rows)
    lines += ["", "*dense fallback*: share of questions where no fact was linked and HippoRAG 2 returned the "
              "dense ranking; *s / question*: retrieval time per question on this machine (CPU). *dense_first=N*: "
              "the top-N dense passages first, then the graph ranking.", ""]
    if col == "MuSiQue":
        lines += ["Paper Table 9, MuSiQue Recall@5, dense -> HippoRAG 2 with other embedders: "
                  + "; ".join(f"{n} {a} -> {b}" for n, a, b in PAPER_OTHER_DENSE_MUSIQUE_R5) + ".", ""]
    lines += ["## Recall@k (%)", ""] + curve_table(r.ks(), curves)
    external = EXTERNAL_RECALL.get(r.ds.name) if len(r.ds) == r.args.full_questions else None
    if external:
        ks = sorted(external[0][1])
        lines += ["", f"### Reference: {EXTERNAL_NOTE}", "",
                  *rows_table(["system (not run here)"] + [f"R@{k}" for k in ks],
                              [[f"{label} — not computed by this command"] + [fmt(v[k]) for k in ks]
                               for label, v in external])]
    return r.write("recall", lines, {k: v for k, v in curves.items() if v},
                   "Passage Recall@k: dense vs HippoRAG 2")
