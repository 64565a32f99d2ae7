"""Projection and ranking agreement of the PostgreSQL scale benchmark (:mod:`reproduce.bench.pg_scale`;
its README is :mod:`reproduce.bench.pg_scale_report`).

:func:`add_projection` scales the measured sizes and rates to ``target`` passages (linear in
the rows, except the HNSW build: N log N), the query process included: each part of the
retriever it measured (passage matrix, fact ids, graph, node ids, PPR kernel) grows with the
rows; :func:`compare_rankings` compares the rankings of the query processes.
"""
from __future__ import annotations

import math

GIB = 1024.0
LIMIT_GIB = 8.0
PAIRS = (("engine-lazy", "engine-exact-ppr"), ("engine-lazy-scan", "engine-exact-ppr"),
         ("engine-lazy", "engine-lazy-scan"), ("engine-lazy", "engine-exact"),
         ("engine-exact", "engine-memory"), ("engine-lazy", "engine-memory"),
         ("engine-lazy-floor100", "engine-exact-ppr"), ("engine-lazy", "engine-lazy-floor100"))
#: the reference database server of the placement section (RAM, disk in GiB)
SERVER_RAM_GIB, SERVER_DISK_GIB = 64.0, 2048.0
#: parts of the retriever's memory that grow with the rows (see ``pg_scale_probe.retriever_memory``)
PARTS = ("passage_matrix", "fact_ids", "node_ids", "graph_arrays", "graph_other", "ppr_kernel")


# ---------------------------------------------------------------------------- agreement
#: how older results' loaders held their stores (before they wrote through a writer's id-only stores)
MIRRORED_LOADER = "the loader's stores mirror every vector as float32"

def _agreement(a: list, b: list) -> dict:
    n = min(len(a), len(b))
    over, recall, same, facts, fact_sets = [], [], 0, 0, 0
    for x, y in zip(a[:n], b[:n], strict=True):
        k = max(len(x["passages"]), len(y["passages"]), 1)
        common = len(set(map(str, x["passages"])) & set(map(str, y["passages"])))
        over.append(common / k)
        recall.append(common / max(len(y["passages"]), 1))
        same += x["passages"] == y["passages"]
        facts += x["facts"] == y["facts"]
        fact_sets += {tuple(f) for f in x["facts"]} == {tuple(f) for f in y["facts"]}
    if not n:
        return {"queries": 0}
    return {"queries": n, "top10_overlap_mean": round(sum(over) / n, 4), "top10_overlap_min": round(min(over), 2),
            "recall_at_10": round(sum(recall) / n, 4),
            "top10_identical": round(same / n, 3), "candidate_facts_identical": round(facts / n, 3),
            "candidate_facts_same_set": round(fact_sets / n, 3)}


def compare_rankings(rankings: dict) -> dict:
    """Agreement of each pair of query processes over their common queries (the first ones):
    top-10 passage overlap (mean, min), recall@10 of the first's top 10 against the second's
    (the reference: exact PPR, exact scans), queries whose top 10 (in order) and whose candidate
    facts (top 5, in order; as a set) are identical."""
    return {f"{a} vs {b}": _agreement(rankings[a], rankings[b]) for a, b in PAIRS
            if rankings.get(a) and rankings.get(b)}


# ---------------------------------------------------------------------------- projection
def _query_process_projection(qp: dict, f: float, p: dict) -> None:
    lazy = qp.get("engine-lazy", {})
    mem = lazy.get("retriever_memory_mib")
    if mem and "rss_after_queries_mib" in lazy:
        base = lazy["rss_after_import_mib"]
        grown = sum(mem.get(k, 0.0) for k in PARTS) + sum(mem.get("other", {}).values())
        for k in PARTS:
            if mem.get(k):
                p[f"lazy_{k}_gib"] = round(mem[k] * f / GIB, 2)
        after = lazy["rss_after_queries_mib"]
        rss = after + grown * (f - 1)
        p["lazy_rss_gib"] = round(rss / GIB, 2)
        # the transient above the steady state (reading the matrix, the graph file) grows with the rows too
        p["lazy_peak_gib"] = round((rss + max(0.0, lazy["peak_rss_mib"] - after) * f) / GIB, 2)
        # bounds: everything above the imported libraries grows with the rows
        p["lazy_rss_bound_gib"] = round((base + (after - base) * f) / GIB, 2)
        p["lazy_peak_bound_gib"] = round((base + (lazy["peak_rss_mib"] - base) * f) / GIB, 2)
        p["lazy_retriever_s"] = round(lazy["retriever_s"] * f, 1)
        p["lazy_query_p50_ms_measured"] = lazy["query_p50_ms"]
        p["lazy_peak_under_8gib_measured"] = lazy["peak_rss_mib"] / GIB < LIMIT_GIB
        p["lazy_peak_under_8gib_projected"] = p["lazy_peak_gib"] < LIMIT_GIB
        p["lazy_peak_bound_under_8gib"] = p["lazy_peak_bound_gib"] < LIMIT_GIB
    for mode, key in (("engine-lazy", "fast_ppr"), ("engine-exact-ppr", "exact_ppr")):
        if qp.get(mode, {}).get("query_p50_ms") is not None:
            p[f"{key}_query_p50_ms_measured"] = qp[mode]["query_p50_ms"]
            if "ppr" in qp[mode].get("query_parts_mean_ms", {}):
                p[f"{key}_part_mean_ms_measured"] = qp[mode]["query_parts_mean_ms"]["ppr"]
    if qp.get("engine-exact-ppr", {}).get("query_p50_ms") is not None:   # the kernel's passes are linear in edges
        p["exact_ppr_query_p50_ms"] = round(qp["engine-exact-ppr"]["query_p50_ms"] * f)
    exact = qp.get("engine-exact", {})
    if "query_p50_ms" in exact and exact["query_p50_ms"] is not None:
        p["exact_query_p50_ms"] = round(exact["query_p50_ms"] * f)
    memory = qp.get("engine-memory", {})
    if "rss_after_retriever_mib" in memory:
        base = memory["rss_after_import_mib"]
        p["memory_rss_gib"] = round((base + (memory["rss_after_retriever_mib"] - base) * f) / GIB, 1)
        p["memory_peak_gib"] = round((base + (memory["peak_rss_mib"] - base) * f) / GIB, 1)
        p["memory_open_s"] = round((memory["open_s"] + memory["retriever_s"]) * f)


def add_projection(res: dict, target: int) -> None:
    """Add ``res["projection"]``: the measured figures scaled to ``target`` passages
    (recomputed whenever called: idempotent)."""
    n = res["args"]["passages"]
    f = target / n
    p: dict = {"passages": target, "factor": round(f, 3), "basis": f"measured at {n} passages"}
    if "load" in res:
        p["vectors"] = round(res["load"]["vectors"] * f)
        p["load_db_min"] = round(res["load"]["db_s"] * f / 60, 1)
    if "graph" in res:
        g = res["graph"]
        p["graph_build_min"] = round(g["build_s"] * f / 60, 1)
        p["graph_file_gib"] = round(g["file_mib"] * f / GIB, 2)
    for s, b in res.get("hnsw_build", {}).items():
        rows = b["rows"]
        p[f"hnsw_build_{s}_min"] = round(b["s"] * f * math.log(rows * f) / math.log(rows) / 60, 1)
    for s, q in res.get("queries", {}).items():
        p[f"exact_pg_scan_{s}_ms"] = round(q["exact_pg_scan_p50_ms"] * f)
        p[f"hnsw_{s}_p50_ms_measured"] = q["hnsw_p50_ms"]
    if "disk" in res:
        d = res["disk"]
        hnsw = sum(d["hnsw_mib"].values())
        p["tables_without_hnsw_gib"] = round((d["tables_total_mib"] - hnsw) * f / GIB, 1)
        p["hnsw_gib"] = round(hnsw * f / GIB, 1)
        p["wal_gib_max"] = 2.0
        p["disk_total_gib"] = round(d["tables_total_mib"] * f / GIB + 2.0, 1)
    _query_process_projection(res.get("query_process", {}), f, p)
    res["projection"] = p
