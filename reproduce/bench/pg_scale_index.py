"""The index phases of the PostgreSQL scale benchmark after the load (:mod:`reproduce.bench.pg_scale`,
steps 2, 3 and 5 of its documentation): the graph file and the index meta, the HNSW indexes, the
store queries (recall and latency against the exact scans) and the sizes on disk."""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from .pg_scale_data import QUERY_STORES
from .pg_scale_probe import graph_memory, load1, pct, peak_mib, rss_mib

INDEX_VERSION = "1"


def write_graph(db, content: dict, index_dir: Path, encoder_name: str, dim: int, res: dict, save) -> None:
    """The graph file and the index meta, with the engine's functions (see the module
    documentation), timed; the graph's and its PPR kernel's sizes."""
    from hippo_engine.config import HippoConfig
    from hippo_engine.index.digest import META_KEY, content_digest
    from hippo_engine.index.graph import build_graph
    from hippo_engine.index.graphstate import GRAPH_FILE
    from hippo_engine.retrieve.ppr.kernel import PPRKernel
    cfg = HippoConfig()
    rss0 = rss_mib()
    t = time.perf_counter()
    g = build_graph(sorted(content["passage_ids"]), content["passage_triples"], content["synonymy"])
    build_s = time.perf_counter() - t
    t = time.perf_counter()
    digest = content_digest(content["passage_ids"], content["passage_triples"], {}, content["synonymy"])
    digest_s = time.perf_counter() - t
    t = time.perf_counter()
    with db.transaction():
        for k, v in (("version", INDEX_VERSION), (META_KEY, digest), ("extractor", "openie"),
                     ("embedding_model", encoder_name), ("dim", str(dim)), ("normalization", cfg.normalization),
                     ("passage_vectors", cfg.passage_vectors)):
            db.set_meta(k, v)
    index_dir.mkdir(parents=True, exist_ok=True)
    path = index_dir / GRAPH_FILE
    g.save(path, INDEX_VERSION, digest)
    save_s = time.perf_counter() - t
    rss_graph = rss_mib()
    t = time.perf_counter()
    kernel = PPRKernel.from_graph(g, cfg.ppr_dtype)
    kernel_s = time.perf_counter() - t
    res["graph"] = {"build_s": round(build_s, 1), "digest_s": round(digest_s, 1),
                    "meta_and_save_s": round(save_s, 1), "kernel_s": round(kernel_s, 1), "stats": g.stats(),
                    "file_mib": round(path.stat().st_size / 2**20, 1),
                    "memory_mib": graph_memory(g, kernel), "rss_before_mib": rss0, "rss_with_graph_mib": rss_graph,
                    "loader_peak_rss_mib": peak_mib(), "load": load1()}
    print(f"graph: {res['graph']}", flush=True)
    save()


def build_hnsw(stores: dict, res: dict, save) -> None:
    """``ensure_hnsw`` on the query-time stores, timed."""
    res["hnsw_build"] = {}
    for s in QUERY_STORES:
        t = time.perf_counter()
        stores[s].ensure_hnsw()
        res["hnsw_build"][s] = {"s": round(time.perf_counter() - t, 1), "rows": len(stores[s]), "load": load1()}
        print(f"HNSW {s}: {res['hnsw_build'][s]}", flush=True)
        save()


def bench_queries(db, stores: dict, queries: dict, args, res: dict, save) -> None:
    """Recall@10 and latency: HNSW (engine), exact (engine's scan and PostgreSQL's scan)."""
    from pgvector import HalfVector
    res["queries"] = {}
    for s in QUERY_STORES:
        st, q = stores[s], queries[s]
        t = time.perf_counter()
        truth, _ = st.nearest(q, 10, exact=True)
        truth_s = time.perf_counter() - t
        lat, hits, same = [], [], 0
        for qv, tr in zip(q, truth, strict=True):
            t = time.perf_counter()
            got, _ = st.nearest(qv, 10)
            lat.append(time.perf_counter() - t)
            hits.append(len(set(got[0]) & set(tr)) / 10)
            same += list(got[0]) == list(tr)
        ne = min(args.exact_queries, len(q))
        sql_lat = []
        c = db.conn
        for qv in q[:ne]:
            with db.snapshot():
                c.execute("SET LOCAL enable_indexscan = off")
                t = time.perf_counter()
                c.execute(f"SELECT id FROM {st.table} ORDER BY vec <#> %s LIMIT 10", (HalfVector(qv),)).fetchall()
                sql_lat.append(time.perf_counter() - t)
        eng_lat = []
        for qv in q[:max(2, ne // 4)]:
            t = time.perf_counter()
            st.nearest(qv, 10, exact=True)
            eng_lat.append(time.perf_counter() - t)
        res["queries"][s] = {
            "rows": len(st), "queries": len(q), "recall_at_10": round(float(np.mean(hits)), 4),
            "top10_identical": round(same / len(q), 3), "hnsw_p50_ms": pct(lat, 50), "hnsw_p95_ms": pct(lat, 95),
            "exact_pg_scan_p50_ms": pct(sql_lat, 50), "exact_pg_scan_p95_ms": pct(sql_lat, 95),
            "exact_pg_scan_queries": ne, "exact_engine_scan_p50_ms": pct(eng_lat, 50),
            "exact_engine_scan_queries": len(eng_lat),
            "truth_batch_s": round(truth_s, 1), "load": load1()}
        print(f"queries {s}: {res['queries'][s]}", flush=True)
        save()


def disk(db, data_dir: Path) -> dict:
    """Sizes in MiB: each table (with its indexes), each HNSW index, the database, the folder."""
    c, mib = db.conn, 2**20
    tables = {r[0]: round(r[1] / mib, 1) for r in c.execute(
        "SELECT c.relname, pg_total_relation_size(c.oid) FROM pg_class c JOIN pg_namespace n ON n.oid = "
        "c.relnamespace WHERE n.nspname = %s AND c.relkind = 'r' ORDER BY 1", (db.schema,))}
    hnsw = {r[0]: round(r[1] / mib, 1) for r in c.execute(
        "SELECT c.relname, pg_relation_size(c.oid) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = %s AND c.relkind = 'i' AND c.relname LIKE '%%hnsw'", (db.schema,))}
    folder = sum(f.stat().st_size for f in data_dir.rglob("*") if f.is_file())
    wal = sum(f.stat().st_size for f in (data_dir / "pg_wal").rglob("*") if f.is_file())
    return {"tables_mib": tables, "hnsw_mib": hnsw, "tables_total_mib": round(sum(tables.values()), 1),
            "database_mib": round(c.execute("SELECT pg_database_size(current_database())").fetchone()[0] / mib, 1),
            "data_dir_mib": round(folder / mib, 1), "wal_mib": round(wal / mib, 1)}

