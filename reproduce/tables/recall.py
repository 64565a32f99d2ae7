"""Table 3 (and 9): passage Recall@2/@5, dense retrieval vs HippoRAG 2 (``table-recall``)."""
from __future__ import annotations

from pathlib import Path

from .methods import dense_method, hippo_method
from .paper import PAPER_ABLATION_R5, PAPER_OTHER_DENSE_MUSIQUE_R5, PAPER_RECALL, paper_column
from .report import curve_table, fmt, llm_label, not_run, pct, require_gold, rows_table
from .results import mean, recall_curve
from .runner import Runner


def table_recall(r: Runner) -> Path:
    """Passage Recall@2/@5, dense retrieval vs HippoRAG 2 (paper Tables 3 and 9)."""
    require_gold(r.ds)
    col = paper_column(r.ds.name)
    dense = dense_method(f"Dense retrieval ({r.embedder_name})")
    hippo = hippo_method(r.use_filter)
    res = {m: r.retrieval(m) for m in (dense, hippo)}
    curves = {m.label: (recall_curve(e, r.ks()) if e else None) for m, e in res.items()}
    rows = []
    for m, e in res.items():
        c = curves[m.label]
        if m.dense:
            p = PAPER_RECALL["dense"].get(col) if col else None
            paper = (fmt(p[0]), fmt(p[1]), "NV-Embed-v2") if p else ("n/a", "n/a", "")
        elif r.use_filter:
            p = PAPER_RECALL["hipporag2"].get(col) if col else None
            paper = (fmt(p[0]), fmt(p[1]), "HippoRAG 2") if p else ("n/a", "n/a", "")
        else:
            p5 = PAPER_ABLATION_R5["no_filter"].get(col) if col else None
            paper = ("n/a", fmt(p5), "HippoRAG 2 w/o filter (Table 4)" if p5 else "")
        fb = (f"{100.0 * sum(x['fallback'] for x in e) / len(e):.0f}%" if e and not m.dense else "")
        sq = fmt(mean([x["s"] for x in e]), 3) if e else "n/a"
        rows.append([m.label, pct(c[2]) if c else not_run(m), pct(c[5]) if c else "", paper[0], paper[1],
                     paper[2], fb, sq])
    lines = r.header("Passage recall: dense retrieval vs HippoRAG 2", "Table 3 (and Table 9)",
                     llm_label(r.llm_name, r.use_filter), [e for e in res.values() if e])
    lines += ["## Recall@2 / Recall@5 (%)", ""]
    lines += rows_table(["method", "R@2", "R@5", "paper R@2", "paper R@5", "paper row", "dense fallback",
                          "s / question"], rows)
    lines += ["", "*dense fallback*: share of questions where no fact was linked and HippoRAG 2 returned the "
              "dense ranking; *s / question*: retrieval time per question on this machine (CPU).", ""]
    if col == "MuSiQue":
        lines += ["Paper Table 9, MuSiQue Recall@5, dense -> HippoRAG 2 with other embedders: "
                  + "; ".join(f"{n} {a} -> {b}" for n, a, b in PAPER_OTHER_DENSE_MUSIQUE_R5) + ".", ""]
    lines += ["## Recall@k (%)", ""] + curve_table(r.ks(), curves)
    return r.write("recall", lines, {k: v for k, v in curves.items() if v},
                   "Passage Recall@k: dense vs HippoRAG 2")
