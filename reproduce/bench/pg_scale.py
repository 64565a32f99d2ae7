"""Scale benchmark of the PostgreSQL + pgvector backend: a synthetic index of ~1M+ vectors.

    python -m reproduce.bench.pg_scale [--passages 150000] [--entities-per-passage 8.6]
        [--facts-per-passage 9] [--dim 384] [--seed 0] [--work DIR] [--base-index SQLITE ...]

1. Vectors: real all-MiniLM-L6-v2 vectors (and texts) of the entity, fact and passage stores
   of existing SQLite indexes (``--base-index``, e.g. MuSiQue-subset indexes), each synthetic row
   ``normalise(b_i + l * b_j + s * g / sqrt(dim))`` with ``b_i, b_j`` two real vectors of the same
   store, ``l ~ U(0, 0.5)``, ``s ~ U(0.4, 0.8)``, ``g`` gaussian: a continuum around the real
   vectors rather than tight copies (the neighbour-score profile is reported beside the real
   one's). Without a base index: a gaussian mixture on the sphere (said so in the result).
2. Load into an embedded PostgreSQL through the engine's classes (``PostgresIndexStore``,
   ``embedding_store(..., vector_dtype="float16")``, ``upsert``: binary COPY), batches of
   ``--batch`` passages, each one write transaction holding its passages, entities, facts,
   triples (``passage_triples``) and synonymy rows; then ``ensure_hnsw()`` on the query-time
   stores (fact, passage).
3. Per store: HNSW ``nearest(q, 10)`` (engine: ef_search 100 + exact rescoring) vs the exact top
   10 (``nearest(..., exact=True)``): recall@10, p50/p95; exact latency as PostgreSQL's own scan
   (``ORDER BY`` without the index) and the engine's exact blocked scan.
4. Query-process memory, each in a fresh process (:mod:`reproduce.bench.pg_scale_probe`):
   ``engine-open`` opens the stores as the engine does today (every vector mirrored in RAM as
   float32) and queries; ``raw`` only queries through a plain connection (the HNSW path,
   nothing loaded), then also loads what a lazy reader would still hold (all ids as numpy
   bytes arrays and the passage matrix in float16).
5. Disk (tables, indexes, data folder with WAL) and a projection to ``--project`` passages.

Every timing carries the 1-minute load average. Results: ``--out`` (JSON, written after each
phase), by default ``reproduce/results/pg_scale/scale.json``, and ``README.md`` beside it
(:mod:`reproduce.bench.pg_scale_report`, which also renders hand-written ``notes`` of the JSON).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from ..common import RESULTS_DIR
from .pg_scale_probe import STORES, load1, pct, peak_mib, run_probe
from .pg_scale_report import add_projection, render

OUT = RESULTS_DIR / "pg_scale" / "scale.json"
QUERY_STORES = ("fact", "passage")
SETTINGS = {"shared_buffers": "1GB", "maintenance_work_mem": "2GB", "max_wal_size": "2GB",
            "max_parallel_maintenance_workers": 1, "work_mem": "64MB"}
DEFAULT_BASES = ("/tmp/det_final/index.sqlite", "/tmp/ner_musique2/index.sqlite")


def unit(x: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length."""
    return x / np.linalg.norm(x, axis=1, keepdims=True)


# ---------------------------------------------------------------------------- synthetic data
def load_bases(paths, dim: int) -> tuple[dict, list[str]]:
    """Real vectors and texts per store from SQLite indexes (float32 blobs), deduplicated."""
    vecs = {s: [] for s in STORES}
    texts = {s: [] for s in STORES}
    used = []
    for p in paths:
        if not Path(p).is_file():
            continue
        db = sqlite3.connect(f"file:{p}?mode=ro", uri=True)
        for s in STORES:
            for content, blob in db.execute(f"SELECT content, vec FROM store_{s}"):
                v = np.frombuffer(blob, np.float32)
                if v.shape[0] == dim:
                    vecs[s].append(v)
                    texts[s].append(content)
        db.close()
        used.append(str(p))
    out = {}
    for s in STORES:
        if vecs[s]:
            mat, idx = np.unique(np.stack(vecs[s]), axis=0, return_index=True)
            out[s] = (unit(mat.astype(np.float32)), [texts[s][i] for i in idx])
    return (out if len(out) == len(STORES) else {}), used


def mixture_bases(rng, dim: int, n: int = 2000) -> dict:
    """Fallback without real vectors: cluster centres on the sphere and placeholder texts."""
    lens = {"passage": 480, "entity": 17, "fact": 60}
    return {s: (unit(rng.standard_normal((n, dim)).astype(np.float32)), ["x" * lens[s]] * n) for s in STORES}


def synth(rng, base: np.ndarray, n: int) -> np.ndarray:
    """``n`` unit vectors around the real ``base`` rows (see the module documentation)."""
    m, dim = base.shape
    i, j = rng.integers(0, m, n), rng.integers(0, m, n)
    lam = rng.uniform(0.0, 0.5, (n, 1)).astype(np.float32)
    sig = rng.uniform(0.4, 0.8, (n, 1)).astype(np.float32)
    g = rng.standard_normal((n, dim), dtype=np.float32) / np.float32(math.sqrt(dim))
    return unit(base[i] + lam * base[j] + sig * g)


def make_ids(rng, prefix: str, n: int) -> list[str]:
    """Random 32-hex ids (random order for the btrees, like the engine's md5 ids)."""
    raw = rng.integers(0, 2**63, (n, 2), dtype=np.int64)
    return [f"{prefix}-{a:016x}{b:016x}" for a, b in raw.tolist()]


def profile(store_vecs: np.ndarray, queries: np.ndarray) -> dict:
    """Mean neighbour scores #1, #10, #100 and the #10-#11 gap of ``queries`` in a sample."""
    s = -np.sort(-(queries @ store_vecs.T), axis=1)[:, :101]

    def col(i: int):
        return round(float(s[:, i].mean()), 3) if s.shape[1] > i else None
    gap = round(float((s[:, 9] - s[:, 10]).mean()), 4) if s.shape[1] > 10 else None
    return {"n1": col(0), "n10": col(9), "n100": col(99), "gap10_11": gap}


# ---------------------------------------------------------------------------- phases
def load_index(db, stores: dict, bases: dict, args, rng, res: dict, save) -> None:
    """Write the synthetic index in batches of ``args.batch`` passages, one transaction each."""
    per = {"passage": 1.0, "entity": args.entities_per_passage, "fact": args.facts_per_passage}
    done = {s: 0 for s in STORES}
    counts = {s: round(per[s] * args.passages) for s in STORES}
    batches, t_all, db_s, syn_rows, tri_rows = [], time.perf_counter(), 0.0, 0, 0
    for start in range(0, args.passages, args.batch):
        stop = min(args.passages, start + args.batch)
        gen_t = time.perf_counter()
        rows = {}
        for s in STORES:
            n = round(per[s] * stop) - done[s] if stop < args.passages else counts[s] - done[s]
            vec, txt = bases[s]
            pick = rng.integers(0, len(txt), n)
            rows[s] = (make_ids(rng, s, n), [txt[k] for k in pick], synth(rng, vec, n))
            done[s] += n
        pids, eids, fids = rows["passage"][0], rows["entity"][0], rows["fact"][0]
        owner = rng.integers(0, len(pids), len(fids))
        triples = [(pids[o], int(k), eids[k % len(eids)], "related to", eids[(k * 7 + 1) % len(eids)])
                   for k, o in enumerate(owner.tolist())]
        syn = {(eids[k], eids[int(d)]) for k, d in enumerate(rng.integers(0, len(eids), len(eids))) if d != k}
        gen_s = time.perf_counter() - gen_t
        t = time.perf_counter()
        with db.transaction() as c:
            for s in STORES:
                stores[s].upsert(*rows[s])
            with c.cursor() as cur, cur.copy(f"COPY {db.q}.passage_triples (passage_id, pos, subj, pred, obj) "
                                             "FROM STDIN") as cp:
                for r in triples:
                    cp.write_row(r)
            with c.cursor() as cur, cur.copy(f"COPY {db.q}.synonymy (src, dst, score) FROM STDIN") as cp:
                for a, b in syn:
                    cp.write_row((a, b, 0.9))
        dt = time.perf_counter() - t
        db_s += dt
        syn_rows += len(syn)
        tri_rows += len(triples)
        batches.append({"passages": stop, "db_s": round(dt, 2), "gen_s": round(gen_s, 2), "load": load1()})
        print(f"batch to {stop} passages: db {dt:.1f}s gen {gen_s:.1f}s (load {load1()})", flush=True)
    vectors = sum(done.values())
    t = time.perf_counter()
    db.conn.execute("VACUUM ANALYZE")
    res["load"] = {"rows": dict(done), "vectors": vectors, "triples": tri_rows, "synonymy": syn_rows,
                   "db_s": round(db_s, 1), "wall_s": round(time.perf_counter() - t_all, 1),
                   "vacuum_analyze_s": round(time.perf_counter() - t, 1),
                   "vectors_per_s": round(vectors / db_s), "loader_peak_rss_mib": peak_mib(),
                   "batches": batches, "load_avg": load1()}
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


def main(argv=None) -> int:
    """Command line: see the module documentation."""
    ap = argparse.ArgumentParser(prog="python -m reproduce.bench.pg_scale", description=__doc__.split("\n")[0])
    ap.add_argument("--passages", type=int, default=150_000)
    ap.add_argument("--entities-per-passage", type=float, default=8.6)
    ap.add_argument("--facts-per-passage", type=float, default=9.0)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--batch", type=int, default=10_000, help="passages per write transaction")
    ap.add_argument("--queries", type=int, default=100, help="HNSW queries per store")
    ap.add_argument("--exact-queries", type=int, default=20, help="queries timed on PostgreSQL's exact scan")
    ap.add_argument("--work", default=None, help="folder for the data directory (default: a temp folder)")
    ap.add_argument("--keep", action="store_true", help="keep the data directory (default: removed at the end)")
    ap.add_argument("--base-index", nargs="*", default=list(DEFAULT_BASES), help="SQLite indexes with real vectors")
    ap.add_argument("--project", type=int, default=1_000_000, help="passages of the projection")
    ap.add_argument("--out", default=str(OUT))
    ap.add_argument("--schema", default="scale", help="schema of the index")
    args = ap.parse_args(argv)
    from hippo_engine.store.postgres.db import PostgresIndexStore
    from hippo_engine.store.postgres.server import EmbeddedPostgres
    rng = np.random.default_rng(args.seed)
    bases, used = load_bases(args.base_index, args.dim)
    source = f"real all-MiniLM-L6-v2 vectors of {', '.join(used)}" if bases else "gaussian mixture (no base index)"
    if not bases:
        bases = mixture_bases(rng, args.dim)
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="hippo-pgscale-"))
    work.mkdir(parents=True, exist_ok=True)
    if os.geteuid() == 0:
        work.chmod(0o711)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    res = {"args": vars(args),
           "vectors_from": source, "base_rows": {s: len(bases[s][1]) for s in STORES},
           "settings": SETTINGS, "cpus": os.cpu_count(), "started": time.strftime("%Y-%m-%d %H:%M:%S UTC",
                                                                                    time.gmtime())}

    def save() -> None:
        add_projection(res, args.project)
        out.write_text(json.dumps(res, indent=1) + "\n")
        out.with_name("README.md").write_text(render(res) + "\n")

    server = EmbeddedPostgres(work / "pg", settings=SETTINGS)
    try:
        dsn = server.start()
        db = PostgresIndexStore(dsn, args.schema)
        stores = {s: db.embedding_store(s, args.dim, vector_dtype="float16") for s in STORES}
        load_index(db, stores, bases, args, rng, res, save)
        queries = {s: synth(rng, bases[s][0], args.queries) for s in QUERY_STORES}
        sample = {s: stores[s].matrix[rng.choice(len(stores[s]), min(len(stores[s]), 200_000), replace=False)]
                  for s in QUERY_STORES}
        res["neighbour_profile"] = {s: {"synthetic": profile(sample[s], queries[s][:50]),
                                        "real_base": profile(bases[s][0], synth(rng, bases[s][0], 50))}
                                    for s in QUERY_STORES}
        del sample
        build_hnsw(stores, res, save)
        bench_queries(db, stores, queries, args, res, save)
        res["disk"] = disk(db, work / "pg")
        save()
        db.close()
        del stores
        qfile = work / "queries.npz"
        np.savez(qfile, **{s: queries[s][:50] for s in QUERY_STORES})
        res["query_process"] = {m: run_probe(m, dsn, args.schema, args.dim, qfile) for m in ("raw", "engine-open")}
        res["finished"] = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
        save()
        print(json.dumps(res["query_process"], indent=1), flush=True)
    finally:
        server.stop()
        if not args.keep:
            shutil.rmtree(work / "pg", ignore_errors=True)
            if not args.work:
                shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
