"""Table 2: QA exact match and F1, dense vs HippoRAG 2 with the same reader (``table-qa``)."""
from __future__ import annotations

from pathlib import Path

from .methods import DEFAULTS, dense_method, hippo_method
from .paper import PAPER_QA_F1, paper_column
from .report import fmt, not_run, pct, rows_table
from .results import mean, recall_curve
from .runner import Runner


def table_qa(r: Runner) -> Path:
    """QA exact match and F1, dense vs HippoRAG 2 with the same reader (paper Table 2)."""
    col = paper_column(r.ds.name)
    dense = dense_method(f"Dense retrieval ({r.embedder_name}) + reader")
    hippo = r.fused(hippo_method(r.use_filter, "hipporag2", "HippoRAG 2 + reader"))
    rows, used = [], []
    for m, pkey in ((dense, "dense"), (hippo, "hipporag2")):
        q = r.qa(m)
        ret = r.retrieval(m, compute=False) if q else None
        if q is None:
            rows.append([m.label, not_run(m), "", "", "", "n/a", "n/a", ""])
            continue
        used += [q, ret or []]
        p = PAPER_QA_F1[pkey].get(col) if col else None
        pf1 = fmt(p) + ("" if r.use_filter or m.dense or p is None else " (with filter)") if p is not None else "n/a"
        r5 = pct(recall_curve(ret, [5])[5]) if (ret and r.ds.gold_docs is not None) else "n/a"
        sq = mean([a["s"] + b["s"] for a, b in zip(q, ret, strict=False)]) if ret else mean([a["s"] for a in q])
        errors = sum(1 for a in q if a.get("error"))
        rows.append([m.label, pct(mean([a["em"] for a in q])), pct(mean([a["f1"] for a in q])), r5,
                     "n/a", pf1, fmt(sq, 1), str(errors)])
    lines = r.header("QA: dense retrieval vs HippoRAG 2, same reader", "Table 2", f"`{r.llm_name}`", used)
    lines += ["## Exact match / F1 (%)", ""]
    lines += rows_table(["method", "EM", "F1", "R@5 of passages read", "paper EM", "paper F1",
                          "s / question (retrieval + reading)", "reader errors"], rows)
    lines += ["", f"The reader sees the top {DEFAULTS.qa_top_k} passages; EM/F1 use SQuAD normalisation and the "
              "best gold alias. The paper reports F1 only in its main table (hence paper EM n/a); its reader is "
              "Llama-3.3-70B, ours is the model above, so absolute values are not comparable — the dense vs "
              "HippoRAG 2 difference is."]
    return r.write("qa", lines)
