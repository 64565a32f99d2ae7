"""Projection and README of the PostgreSQL scale benchmark (:mod:`reproduce.bench.pg_scale`).

    python -m reproduce.bench.pg_scale_report [scale.json] [README.md]

:func:`add_projection` scales the measured sizes and rates to ``target`` passages (linear in
the rows, except the HNSW build: N log N); :func:`render` writes the results as markdown (with the ``notes`` list of
the JSON, hand-written findings, as a last section).
"""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path

from ..common import RESULTS_DIR

GIB = 1024.0


def add_projection(res: dict, target: int) -> None:
    """Add ``res["projection"]``: the measured figures scaled to ``target`` passages
    (recomputed whenever called: idempotent)."""
    n = res["args"]["passages"]
    f = target / n
    p: dict = {"passages": target, "factor": round(f, 3), "basis": f"measured at {n} passages"}
    if "load" in res:
        p["vectors"] = round(res["load"]["vectors"] * f)
        p["load_db_min"] = round(res["load"]["db_s"] * f / 60, 1)
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
    qp = res.get("query_process", {})
    eng, raw = qp.get("engine-open", {}), qp.get("raw", {})
    if "rss_after_open_mib" in eng:
        base = raw.get("rss_start_mib", 0.0)
        p["engine_open_rss_gib"] = round((base + (eng["rss_after_open_mib"] - base) * f) / GIB, 1)
        p["engine_open_peak_gib"] = round((base + (eng["peak_rss_mib"] - base) * f) / GIB, 1)
        p["engine_open_s"] = round(eng["open_s"] * f)
    if "ids_mib" in raw:
        p["lazy_ids_gib"] = round(raw["ids_mib"] * f / GIB, 2)
        p["lazy_passage_matrix_f16_gib"] = round(raw["passage_matrix_mib"] * f / GIB, 2)
        # the HNSW query path does not grow with the index; ids and the passage matrix do
        p["lazy_rss_gib"] = round((raw["peak_after_queries_mib"]
                                   + (raw["ids_mib"] + raw["passage_matrix_mib"]) * f) / GIB, 2)
    res["projection"] = p


def _table(rows, head) -> list[str]:
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return out


def render(res: dict) -> str:
    """The results as markdown."""
    a = res["args"]
    lines = [f"# PostgreSQL + pgvector at scale: {a['passages']:,} passages", "",
             "Command: `python -m reproduce.bench.pg_scale --passages {} --entities-per-passage {} "
             "--facts-per-passage {} --dim {} --seed {}`".format(a["passages"], a["entities_per_passage"],
                                                               a["facts_per_passage"], a["dim"], a["seed"]),
             "", f"Vectors: synthetic, derived from {res['vectors_from']} (base rows {res['base_rows']}); "
             "halfvec (float16) columns. Server settings: " + ", ".join(f"{k}={v}" for k, v in res["settings"].items())
             + f". {res['cpus']} shared CPU cores; the load average (1 min) is given with every timing.", ""]
    if "load" in res:
        ld = res["load"]
        lines += ["## Index time", "", f"Rows: {ld['rows']} = **{ld['vectors']:,} vectors**, {ld['triples']:,} "
                  f"triples, {ld['synonymy']:,} synonymy rows, in {len(ld['batches'])} write transactions. "
                  f"Database time {ld['db_s']} s ({ld['vectors_per_s']:,} vectors/s), wall {ld['wall_s']} s "
                  f"(with data generation), VACUUM ANALYZE {ld['vacuum_analyze_s']} s; loader peak RSS "
                  f"{ld['loader_peak_rss_mib']} MiB (the stores mirror every vector as float32). Load avg at the end "
                  f"{ld['load_avg']}.", ""]
    if "neighbour_profile" in res:
        rows = [(s, k, v["n1"], v["n10"], v["n100"], v["gap10_11"])
                for s, d in res["neighbour_profile"].items() for k, v in d.items()]
        lines += ["Neighbour scores of the queries (mean #1, #10, #100, gap #10-#11): the synthetic table vs the "
                  "real vectors the rows derive from (synthetic: a 200k-row sample of the table; queries: "
                  "perturbed real vectors, as in the query benchmark):", ""]
        lines += _table(rows, ("store", "vectors", "#1", "#10", "#100", "gap")) + [""]
    if "hnsw_build" in res:
        rows = [(s, b["rows"], b["s"], b["load"]) for s, b in res["hnsw_build"].items()]
        lines += ["## HNSW build (`ensure_hnsw`: m=16, ef_construction=64, halfvec_ip_ops)", ""]
        lines += _table(rows, ("store", "rows", "seconds", "load")) + [""]
    if "queries" in res:
        rows = [(s, q["rows"], q["queries"], q["recall_at_10"], q["top10_identical"], q["hnsw_p50_ms"],
                 q["hnsw_p95_ms"], f"{q['exact_pg_scan_p50_ms']} / {q['exact_pg_scan_p95_ms']}",
                 q["exact_engine_scan_p50_ms"], q["load"]) for s, q in res["queries"].items()]
        lines += ["## Queries: HNSW vs exact (top 10)", "",
                  "HNSW = the engine's `nearest(q, 10)` (ef_search 100, candidates rescored in numpy); truth = "
                  "`nearest(q, 10, exact=True)`. Exact PG = PostgreSQL's `ORDER BY vec <#> q LIMIT 10` with index "
                  "scans off; exact engine = `nearest(exact=True)` for one query (every vector read by COPY).", ""]
        lines += _table(rows, ("store", "rows", "queries", "recall@10", "top-10 identical", "HNSW p50 ms",
                               "HNSW p95 ms", "exact PG p50 / p95 ms", "exact engine p50 ms", "load")) + [""]
    if "disk" in res:
        d = res["disk"]
        rows = [(t, m) for t, m in d["tables_mib"].items()] + [(f"(of which {i})", m) for i, m in d["hnsw_mib"].items()]
        lines += ["## Disk (MiB)", ""] + _table(rows, ("table (with indexes)", "MiB")) + [
            "", f"Tables total {d['tables_total_mib']} MiB; database {d['database_mib']} MiB; data folder "
            f"{d['data_dir_mib']} MiB, of which WAL {d['wal_mib']} MiB.", ""]
    qp = res.get("query_process")
    if qp:
        lines += ["## Memory of the query process (fresh processes, RSS)", ""]
        for m, r in qp.items():
            lines += [f"- `{m}`: " + ", ".join(f"{k} {v}" for k, v in r.items() if k != "mode")]
        lines += ["", "`engine-open`: `PostgresIndexStore` + `embedding_store()` of the three stores, as the engine "
                  "opens an index today (every vector mirrored in RAM as float32), then `nearest()` queries. "
                  "`raw`: no store opened; HNSW queries through a plain connection (what a lazy store's `nearest` "
                  "costs), then every id as a numpy bytes array and the passage matrix in float16 (what a lazy "
                  "reader would still hold for dense passage scores).", ""]
    if "projection" in res:
        p = res["projection"]
        lines += [f"## Projection to {p['passages']:,} passages (extrapolated, not measured; {p['basis']})", ""]
        lines += _table(sorted((k, v) for k, v in p.items() if k not in ("passages", "basis")), ("item", "value"))
        lines += ["", "Linear in the rows, except HNSW builds (N log N); HNSW latency is the measured one "
                  "(it grows about with log N, and with cache misses once the index outgrows shared_buffers and "
                  "the page cache). WAL is bounded by max_wal_size (2GB here).", ""]
    if res.get("notes"):
        lines += ["## Findings", ""] + [f"- {n}" for n in res["notes"]] + [""]
    return "\n".join(lines)


def main(argv=None) -> int:
    """Write the README from the JSON."""
    argv = sys.argv[1:] if argv is None else argv
    src = Path(argv[0]) if argv else RESULTS_DIR / "pg_scale" / "scale.json"
    dst = Path(argv[1]) if len(argv) > 1 else src.with_name("README.md")
    res = json.loads(src.read_text())
    add_projection(res, res.get("projection", {}).get("passages", 1_000_000))
    src.write_text(json.dumps(res, indent=1) + "\n")
    dst.write_text(render(res) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
