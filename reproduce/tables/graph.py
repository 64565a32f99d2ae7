"""Tables 10 and 12: graph statistics and indexing cost (``table-graph``)."""
from __future__ import annotations

from pathlib import Path

from .meter import sum_llm, tokens_line
from .methods import dense_method, hippo_method
from .paper import PAPER_COST, PAPER_GRAPH, paper_column
from .report import llm_label, rows_table
from .results import mean
from .runner import Runner


def table_graph(r: Runner) -> Path:
    """Graph statistics and indexing cost (paper Tables 10 and 12)."""
    col = paper_column(r.ds.name)
    g = r.manifest.get("graph") or {}
    pg = PAPER_GRAPH.get(col, {}) if col else {}
    names = [("entity_nodes", "entity nodes"), ("passage_nodes", "passage nodes"),
             ("fact_edges", "fact (relation) edges"), ("context_edges", "context edges (passage-entity)"),
             ("synonymy_edges", "synonymy edges"), ("distinct_edges", "distinct edges (all kinds)")]
    rows = [[label, f"{g.get(k, 0):,}", f"{pg[k]:,}" if k in pg else "n/a"] for k, label in names]
    rows.append(["facts (unique triples)", f"{r.manifest.get('facts', 0):,}", "n/a"])
    rows.append(["total edge weight", f"{g.get('total_edge_weight', 0):,.1f}", "n/a"])
    builds = r.manifest.get("builds", [])
    wall = sum(b["wall_s"] for b in builds)
    stages: dict[str, float] = {}
    for b in builds:
        for k, v in (b.get("timings") or {}).items():
            stages[k] = stages.get(k, 0.0) + v
    openie_calls = sum(b.get("openie_llm_passages", 0) for b in builds)
    build_llm = sum_llm([{"llm": b.get("llm", {})} for b in builds])
    hippo = r.fused(hippo_method(r.use_filter))
    dense = dense_method("dense")
    eh, ed = r.retrieval(hippo), r.retrieval(dense)
    pc = PAPER_COST.get(col, {}) if col else {}
    cost = [["indexing wall time (OpenIE import/LLM + embedding + synonymy + graph)",
             f"{wall:.1f} s ({wall / 60:.2f} min)" if builds else "n/a (index built outside these commands)",
             f"{pc['indexing_min']} min" if pc else "n/a"],
            ["passages sent to the LLM for OpenIE", f"{openie_calls:,}" if builds else "n/a",
             "all (Llama-3.3-70B)" if pc else "n/a"],
            ["LLM tokens for indexing", tokens_line(build_llm) if builds else "n/a", "n/a"],
            [f"HippoRAG 2 retrieval per query (filter {'on' if r.use_filter else 'off'})",
             f"{mean([e['s'] for e in eh]):.3f} s" if eh else "n/a",
             f"{pc['query_s']} s (GPU, with filter)" if pc else "n/a"],
            ["dense retrieval per query", f"{mean([e['s'] for e in ed]):.3f} s" if ed else "n/a", "n/a"]]
    cost += [[f"indexing stage: {k}", f"{v:.1f} s", "n/a"] for k, v in stages.items() if k != "total"]
    lines = r.header("Graph statistics and indexing cost", "Tables 10 and 12", llm_label(r.llm_name, r.use_filter),
                     [x for x in (eh, ed) if x])
    lines += ["## Graph (Table 10)", ""] + rows_table(["", "ours", "paper"], rows)
    lines += ["", "Our edges are counted once per node pair (a pair linked by a fact and by synonymy counts in "
              "both rows, once in *distinct edges*). The reference implementation adds parallel edges in both "
              "directions, so its counts are not directly comparable."]
    if col == "MuSiQue" and r.ds.name != "musique":
        lines += [f"The paper's figures are for the full MuSiQue corpus (11,656 passages, Llama-3.3-70B OpenIE); "
                  f"this corpus has {len(r.ds.docs):,} passages."]
    lines += ["", "## Cost (Table 12)", ""] + rows_table(["", "ours (CPU, this machine)", "paper"], cost)
    return r.write("graph", lines)
