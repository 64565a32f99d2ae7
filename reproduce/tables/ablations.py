"""Table 4: ablations of HippoRAG 2 with an ordering check (``table-ablations``)."""
from __future__ import annotations

from pathlib import Path

from .methods import ablation_methods
from .paper import PAPER_ABLATION_R5, paper_column
from .report import S_NOTE, curve_table, fmt, llm_label, not_run, pct, require_gold, rows_table
from .results import mean, paired_difference, recall_curve
from .runner import Runner


def ordering(curves: dict[str, dict | None], entries: dict[str, list | None], k: int = 5) -> list[str]:
    """The paper's ordering of the ablations, checked on Recall@k with a paired bootstrap per pair."""
    c = {key: (v[k] if v else None) for key, v in curves.items()}
    checks = [("query-to-node < NER-to-node", "query", "ner"), ("NER-to-node < full", "ner", "full"),
              ("w/o passage nodes < full", "no_passage", "full")]
    out = []
    for text, a, b in checks:
        if c.get(a) is None or c.get(b) is None:
            out.append(f"- {text}: not measured")
            continue
        verdict = "yes" if c[a] < c[b] else ("tie" if abs(c[a] - c[b]) < 1e-12 else "no")
        p = paired_difference(entries[a], entries[b], k)
        out.append(f"- {text}: {verdict} ({pct(c[a])} vs {pct(c[b])}; per question {100 * p['mean']:+.1f} points, "
                   f"95% bootstrap interval [{100 * p['low']:+.1f}, {100 * p['high']:+.1f}], "
                   f"{p['better']} better / {p['worse']} worse)")
    return out


def table_ablations(r: Runner) -> Path:
    """Ablations: NER-to-node, query-to-node, no passage nodes, no filter (paper Table 4)."""
    require_gold(r.ds)
    col = paper_column(r.ds.name)
    methods = [r.fused(m) for m in ablation_methods(r.use_filter)]
    res = {m: r.retrieval(m) for m in methods}
    curves = {m.key: (recall_curve(e, r.ks()) if e else None) for m, e in res.items()}
    rows = []
    for m, e in res.items():
        c = curves[m.key]
        pkey = "no_filter" if (m.key == "full" and not r.use_filter) else m.key
        p5 = PAPER_ABLATION_R5[pkey].get(col) if col else None
        prow = {"full": "full", "ner": "NER-to-node", "query": "query-to-node", "no_passage": "w/o passage node",
                "no_filter": "w/o filter"}[pkey]
        rows.append([m.label, "yes" if m.needs_llm else "no", pct(c[2]) if c else not_run(m),
                     pct(c[5]) if c else "", fmt(p5), prow if p5 is not None else "",
                     fmt(mean([x["s"] for x in e]), 3) if e else "n/a"])
    uses = any(m.needs_llm and res[m] for m in methods)
    lines = r.header("Ablations of HippoRAG 2", "Table 4", llm_label(r.llm_name, uses), [e for e in res.values() if e])
    if not r.use_filter:
        lines += ["**Filter off in every row** (`--no-filter`): *full* is HippoRAG 2 without the recognition "
                  "filter, so each ablation is compared with filter-off HippoRAG 2, and the paper's *w/o filter* "
                  "row is the paper figure beside our *full* row. NER-to-node and query-to-node do not link "
                  "through facts, so the filter does not apply to them anyway.", ""]
    lines += ["## Recall (%)", ""]
    lines += rows_table(["configuration", "LLM at query time", "R@2", "R@5", "paper R@5", "paper row",
                          "s / question"], rows)
    lines += ["", "NER-to-node needs the LLM at query time (named entities of the question); query-to-node "
              "and the fact-linking rows without the filter do not. " + S_NOTE, "",
              "## Ordering check (Recall@5; the paper has query-to-node < NER-to-node < full and "
              "w/o passage nodes < full on MuSiQue)", ""] + ordering(curves, {m.key: e for m, e in res.items()})
    lines += ["", "## Recall@k (%)", ""] + curve_table(r.ks(), {m.label: curves[m.key] for m in methods})
    return r.write("ablations", lines, {m.label: curves[m.key] for m in methods if curves[m.key]},
                   "HippoRAG 2 ablations: Recall@k")
