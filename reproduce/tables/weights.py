"""Table 5: passage-node weight sweep (``table-weights``)."""
from __future__ import annotations

from pathlib import Path

from .methods import hippo_method
from .paper import PAPER_ABLATION_R5, paper_column
from .report import S_NOTE, curve_table, fmt, llm_label, not_run, pct, require_gold, rows_table
from .results import mean, recall_curve
from .runner import Runner


def table_weights(r: Runner) -> Path:
    """Passage-node weight sweep (paper Table 5)."""
    require_gold(r.ds)
    col = paper_column(r.ds.name)
    methods = [r.fused(hippo_method(r.use_filter, f"w{w:g}", f"passage_node_weight = {w:g}", passage_node_weight=w))
               for w in r.args.weights]
    res = {m: r.retrieval(m) for m in methods}
    curves = {m.key: (recall_curve(e, r.ks()) if e else None) for m, e in res.items()}
    rows = []
    for w, (m, e) in zip(r.args.weights, res.items(), strict=False):
        c = curves[m.key]
        pkey = "full" if r.use_filter else "no_filter"
        p5 = PAPER_ABLATION_R5[pkey].get(col) if (col and abs(w - 0.05) < 1e-12) else None
        note = ("paper default (Table 4 " + ("full" if r.use_filter else "w/o filter") + ")") if p5 is not None else (
            "n/a (not in our copy of the paper's figures)" if col else "n/a")
        rows.append([f"{w:g}" + (" (default)" if abs(w - 0.05) < 1e-12 else ""),
                     pct(c[2]) if c else not_run(m), pct(c[5]) if c else "", fmt(p5), note,
                     fmt(mean([x["s"] for x in e]), 3) if e else "n/a"])
    lines = r.header("Passage-node weight sweep", "Table 5", llm_label(r.llm_name, r.use_filter),
                     [e for e in res.values() if e])
    lines += ["## Recall (%)", ""]
    lines += rows_table(["passage_node_weight", "R@2", "R@5", "paper R@5", "paper", "s / question"], rows)
    lines += ["", "The weight scales the dense-retrieval passage seeds of the PageRank reset vector (the step "
              "after seeding). The paper's sweep figures other than the default are not in its text, hence n/a. "
              + S_NOTE, "",
              "## Recall@k (%)", ""] + curve_table(r.ks(), {m.label: curves[m.key] for m in methods})
    return r.write("weights", lines, {m.label: curves[m.key] for m in methods if curves[m.key]},
                   "Passage-node weight sweep: Recall@k")
