"""Scale benchmark of the PostgreSQL + pgvector backend: a synthetic index of ~1M+ vectors, queried
through the engine's own retrieval path.

    python -m reproduce.bench.pg_scale [--passages 150000] [--entities-per-passage 8.6]
        [--facts-per-passage 9] [--dim 384] [--seed 0] [--queries 100] [--exact-queries 20]
        [--skip-memory-probe] [--work DIR] [--keep] [--out JSON] [--base-index SQLITE ...]

1. Data, consistent the way the engine builds an index (``extractor="openie"``): entity ``n`` is
   the phrase ``"entity n"`` (entity store id ``mdhash_id(phrase, "entity-")``, content the
   phrase); a fact is the triple ``(phrase_a, "related to", phrase_b)`` (fact store id
   ``mdhash_id(fact_text(t), "fact-")``, content ``fact_text(t)``), stated by one passage of its
   batch (``passage_triples`` rows hold the phrases, in the passage's order); passage ``n`` is
   ``"passage n: " + a real passage text`` (id ``mdhash_id(text, "chunk-")``). Each batch's
   entities are the subjects of its facts (every entity is in the graph); objects are drawn from
   every entity written so far, so the graph links batches. Synonymy: one list per entity, one
   neighbour drawn from the entities written so far, score ``U(0.8, 1)``.
   Vectors (independent of the texts): real all-MiniLM-L6-v2 vectors of the entity, fact and
   passage stores of existing SQLite indexes (``--base-index``, e.g. MuSiQue-subset indexes),
   each synthetic row ``normalise(b_i + l * b_j + s * g / sqrt(dim))`` with ``b_i, b_j`` two real
   vectors of the same store, ``l ~ U(0, 0.5)``, ``s ~ U(0.4, 0.8)``, ``g`` gaussian: a continuum
   around the real vectors rather than tight copies (the neighbour-score profile is reported
   beside the real one's). Without a base index: a gaussian mixture on the sphere (said so).
2. Load into an embedded PostgreSQL through the engine's classes (``PostgresIndexStore``,
   ``embedding_store(..., vector_dtype="float16")``, ``upsert``: binary COPY), batches of
   ``--batch`` passages, each one write transaction holding its passages, entities, facts,
   triples (``passage_triples`` by COPY, with ``fact_id`` when the table has that column) and
   synonymy rows. Then the graph, with the engine's functions: ``build_graph`` over every
   passage's triples and the synonymy lists, ``content_digest``, the index meta (``version``,
   the digest, ``extractor``, ``embedding_model``, ``dim``, ``normalization``,
   ``passage_vectors``) in one write transaction, and ``GraphData.save`` to
   ``<work>/index/graph.npz`` labelled with them (so the query process loads it instead of
   rebuilding it); timed, with its arrays' and its PPR kernel's sizes. VACUUM ANALYZE, then
   ``ensure_hnsw()`` on the fact and passage stores.
3. Per store: HNSW ``nearest(q, 10)`` (engine: ef_search 100 + exact rescoring) vs the exact top
   10 (``nearest(..., exact=True)``): recall@10, p50/p95; exact latency as PostgreSQL's own scan
   (``ORDER BY`` without the index) and the engine's exact blocked scan.
4. The query process, each mode in a fresh process (:mod:`reproduce.bench.pg_scale_probe`):
   ``HippoRAG(<work>/index, storage="postgres", dsn=..., postgres_schema=..., postgres_search=MODE)``,
   ``rag.retriever`` (loads what the retriever holds: the passage matrix and the graph), then
   queries one per ``Retriever.search`` call (no recognition filter, top 10): ``engine-lazy``
   (``postgres_search="hnsw"``, ``--queries`` queries), ``engine-exact`` (``"exact"``: exact
   scans in the database, ``--exact-queries`` queries) and, unless ``--skip-memory-probe``,
   ``engine-memory`` (``"memory"``: every vector mirrored, as the engine opened an index before
   the lazy reader; 5+ GB at 150k passages; ``--exact-queries`` queries). Each reports open and
   retriever times, resident memory after each step, peak memory (``VmHWM``), latency p50/p95
   and the retriever's memory by part (passage matrix, fact ids, graph arrays, node ids, PPR
   kernel). Rankings are compared: top-10 passage overlap of lazy-HNSW vs lazy-exact per query,
   and the fraction of queries whose candidate facts (top 5) are identical.
   The query vectors are given to ``Retriever.search`` directly (a query is a pair of synthetic
   vectors: one around the real fact vectors for fact scoring, one around the real passage
   vectors for passage scoring), so the facade gets a stand-in encoder that has the index's
   model name and dimension and refuses to encode: encoding a query is outside what is
   measured here; everything after it is the engine's own path.
5. Disk (tables, indexes, data folder with WAL) and a projection to ``--project`` passages of
   the database and of the query process (each measured part of the retriever scaled with the
   rows), with whether the query process stays under 8 GiB.

Every timing carries the 1-minute load average. Results: ``--out`` (JSON, written after each
phase), by default ``reproduce/results/pg_scale/scale.json``, and ``README.md`` beside it
(:mod:`reproduce.bench.pg_scale_report`, which also renders hand-written ``notes`` of the JSON).
"""
from __future__ import annotations

import argparse
import gc
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
from .pg_scale_probe import (
    ENCODER_NAME,
    STORES,
    graph_memory,
    load1,
    pct,
    peak_mib,
    rss_mib,
    run_probe,
)
from .pg_scale_report import add_projection, compare_rankings, render

OUT = RESULTS_DIR / "pg_scale" / "scale.json"
QUERY_STORES = ("fact", "passage")
SETTINGS = {"shared_buffers": "1GB", "maintenance_work_mem": "2GB", "max_wal_size": "2GB",
            "max_parallel_maintenance_workers": 1, "work_mem": "64MB"}
DEFAULT_BASES = ("/tmp/det_final/index.sqlite", "/tmp/ner_musique2/index.sqlite")
PREDICATE = "related to"
INDEX_VERSION = "1"
PROFILE_ROWS = 200_000


def unit(x: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length."""
    return x / np.linalg.norm(x, axis=1, keepdims=True)


# ---------------------------------------------------------------------------- synthetic vectors
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


def profile(store_vecs: np.ndarray, queries: np.ndarray) -> dict:
    """Mean neighbour scores #1, #10, #100 and the #10-#11 gap of ``queries`` in a sample."""
    s = -np.sort(-(queries @ store_vecs.T), axis=1)[:, :101]

    def col(i: int):
        return round(float(s[:, i].mean()), 3) if s.shape[1] > i else None
    gap = round(float((s[:, 9] - s[:, 10]).mean()), 4) if s.shape[1] > 10 else None
    return {"n1": col(0), "n10": col(9), "n100": col(99), "gap10_11": gap}


# ---------------------------------------------------------------------------- consistent content
def fact_endpoints(rng, e0: int, nb: int, nf: int) -> tuple[np.ndarray, np.ndarray]:
    """Subject and object entity numbers of ``nf`` distinct facts of a batch whose new entities
    are ``e0 .. e0+nb-1``: every new entity is a subject (or, with fewer facts than entities, an
    object), the other objects are drawn from all ``e0+nb`` entities; no self-loop, no pair
    twice (subjects are new, so no pair of an earlier batch either)."""
    if 2 * nf < nb:
        raise ValueError(f"{nf} facts cannot link {nb} new entities: raise --facts-per-passage")
    perm = e0 + rng.permutation(nb)
    subj = perm[np.arange(nf) % nb] if nb else rng.integers(0, max(e0, 1), nf)
    obj = rng.integers(0, e0 + nb, nf)
    fixed = np.zeros(nf, bool)
    if nb > nf:                               # the entities left over are objects
        obj[:nb - nf] = perm[nf:]
        fixed[:nb - nf] = True
    total = np.int64(e0 + nb)
    for _ in range(1000):
        key = subj.astype(np.int64) * total + obj
        first = np.zeros(nf, bool)
        first[np.unique(key, return_index=True)[1]] = True
        bad = ((subj == obj) | ~first) & ~fixed
        if not bad.any():
            return subj, obj
        obj[bad] = rng.integers(0, e0 + nb, int(bad.sum()))
    raise RuntimeError("could not draw distinct facts")  # pragma: no cover


def batch_content(rng, bases: dict, first: dict, counts: dict, phrases: list[str], entity_ids: list[str]
                  ) -> dict:
    """One batch's rows, consistent the way the engine writes an index: ``first`` and
    ``counts`` give the number of the batch's first row and its row count per store;
    ``phrases``/``entity_ids`` (every entity so far) are extended with the new entities."""
    from hippo_engine.text import fact_text, mdhash_id
    e0, nb, nf, npas = first["entity"], counts["entity"], counts["fact"], counts["passage"]
    new_phrases = [f"entity {n}" for n in range(e0, e0 + nb)]
    new_eids = [mdhash_id(p, "entity-") for p in new_phrases]
    phrases.extend(new_phrases)
    entity_ids.extend(new_eids)
    subj, obj = fact_endpoints(rng, e0, nb, nf)
    owner = rng.integers(0, npas, nf)
    order = np.argsort(owner, kind="stable")           # a passage's triples in fact order
    triples = [(phrases[s], PREDICATE, phrases[o]) for s, o in zip(subj[order].tolist(), obj[order].tolist(),
                                                                    strict=True)]
    owner = owner[order]
    ftexts = [fact_text(t) for t in triples]
    fids = [mdhash_id(t, "fact-") for t in ftexts]
    ptxt_base = bases["passage"][1]
    ptexts = [f"passage {first['passage'] + i}: {ptxt_base[k]}"
              for i, k in enumerate(rng.integers(0, len(ptxt_base), npas).tolist())]
    pids = [mdhash_id(t, "chunk-") for t in ptexts]
    by_passage: dict[str, list] = {}
    rows = []                                          # (passage_id, pos, s, p, o, fact_id)
    for o, t, fid in zip(owner.tolist(), triples, fids, strict=True):
        lst = by_passage.setdefault(pids[o], [])
        rows.append((pids[o], len(lst), t[0], t[1], t[2], fid))
        lst.append(t)
    syn_dst = rng.integers(0, e0 + nb - 1, nb) if e0 + nb > 1 else np.zeros(0, np.int64)
    src_num = np.arange(e0, e0 + nb)
    syn_dst = syn_dst + (syn_dst >= src_num)           # never the entity itself
    scores = rng.uniform(0.8, 1.0, nb)
    synonymy = {entity_ids[s]: {entity_ids[d]: float(w)}
                for s, d, w in zip(src_num.tolist(), syn_dst.tolist(), scores.tolist(), strict=False)}
    vec = {s: synth(rng, bases[s][0], counts[s]) for s in STORES}
    return {"passage": (pids, ptexts, vec["passage"]), "entity": (new_eids, new_phrases, vec["entity"]),
            "fact": (fids, ftexts, vec["fact"]), "triple_rows": rows, "passage_triples": by_passage,
            "synonymy": synonymy}


def triple_columns(db) -> list[str]:
    """The columns of ``passage_triples`` that the benchmark fills (``fact_id`` when present)."""
    have = [r[0] for r in db.conn.execute(
        "SELECT column_name FROM information_schema.columns WHERE table_schema = %s AND table_name = "
        "'passage_triples' ORDER BY ordinal_position", (db.schema,))]
    cols = ["passage_id", "pos", "subj", "pred", "obj"]
    return cols + (["fact_id"] if "fact_id" in have else [])


# ---------------------------------------------------------------------------- phases
def load_index(db, stores: dict, bases: dict, args, rng, res: dict, save) -> dict:
    """Write the synthetic index in batches of ``args.batch`` passages, one transaction each.
    Returns what the graph is built from (passage ids, triples per passage, synonymy lists) and
    a sample of the fact and passage vectors (for the neighbour profile)."""
    per = {"passage": 1.0, "entity": args.entities_per_passage, "fact": args.facts_per_passage}
    done = {s: 0 for s in STORES}
    total = {s: round(per[s] * args.passages) for s in STORES}
    keep_p = {s: min(1.0, PROFILE_ROWS / max(1, total[s])) for s in QUERY_STORES}
    sample = {s: [] for s in QUERY_STORES}
    cols = triple_columns(db)
    phrases: list[str] = []
    entity_ids: list[str] = []
    pids_all: list[str] = []
    passage_triples: dict[str, list] = {}
    synonymy: dict[str, dict[str, float]] = {}
    batches, t_all, db_s, syn_rows, tri_rows = [], time.perf_counter(), 0.0, 0, 0
    for start in range(0, args.passages, args.batch):
        stop = min(args.passages, start + args.batch)
        gen_t = time.perf_counter()
        counts = {s: (round(per[s] * stop) if stop < args.passages else total[s]) - done[s] for s in STORES}
        b = batch_content(rng, bases, dict(done), counts, phrases, entity_ids)
        for s in QUERY_STORES:
            v = b[s][2]
            sample[s].append(v[rng.random(len(v)) < keep_p[s]])
        gen_s = time.perf_counter() - gen_t
        t = time.perf_counter()
        with db.transaction() as c:
            for s in STORES:
                stores[s].upsert(*b[s])
            with c.cursor() as cur, cur.copy(f"COPY {db.q}.passage_triples ({', '.join(cols)}) FROM STDIN") as cp:
                for r in b["triple_rows"]:
                    cp.write_row(r[:len(cols)])
            with c.cursor() as cur, cur.copy(f"COPY {db.q}.synonymy (src, dst, score) FROM STDIN") as cp:
                for src, nb in b["synonymy"].items():
                    for dst, w in nb.items():
                        cp.write_row((src, dst, w))
        dt = time.perf_counter() - t
        db_s += dt
        for s in STORES:
            done[s] += counts[s]
        pids_all.extend(b["passage"][0])
        passage_triples.update(b["passage_triples"])
        synonymy.update(b["synonymy"])
        syn_rows += sum(len(x) for x in b["synonymy"].values())
        tri_rows += len(b["triple_rows"])
        batches.append({"passages": stop, "db_s": round(dt, 2), "gen_s": round(gen_s, 2), "load": load1()})
        print(f"batch to {stop} passages: db {dt:.1f}s gen {gen_s:.1f}s (load {load1()})", flush=True)
        del b
    vectors = sum(done.values())
    t = time.perf_counter()
    db.conn.execute("VACUUM ANALYZE")
    res["load"] = {"rows": dict(done), "vectors": vectors, "triples": tri_rows, "synonymy": syn_rows,
                   "triple_columns": cols, "db_s": round(db_s, 1), "wall_s": round(time.perf_counter() - t_all, 1),
                   "vacuum_analyze_s": round(time.perf_counter() - t, 1),
                   "vectors_per_s": round(vectors / db_s), "loader_peak_rss_mib": peak_mib(),
                   "batches": batches, "load_avg": load1()}
    save()
    return {"passage_ids": pids_all, "passage_triples": passage_triples, "synonymy": synonymy,
            "sample": {s: np.concatenate(v) for s, v in sample.items()}}


def write_graph(db, content: dict, index_dir: Path, encoder_name: str, dim: int, res: dict, save) -> None:
    """The graph file and the index meta, with the engine's functions (see the module
    documentation), timed; the graph's and its PPR kernel's sizes."""
    from hippo_engine.config import HippoConfig
    from hippo_engine.index.digest import META_KEY, content_digest
    from hippo_engine.index.graph import build_graph
    from hippo_engine.index.graphstate import GRAPH_FILE
    from hippo_engine.retrieve.ppr import PPRKernel
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


def query_processes(dsn: str, args, index_dir: Path, qfile: Path, res: dict, save) -> None:
    """The engine's query process in each mode, each in a fresh process, and the agreement of
    their rankings."""
    modes = [("engine-lazy", args.queries), ("engine-exact", args.exact_queries)]
    if not args.skip_memory_probe:
        modes.append(("engine-memory", args.exact_queries))
    res["query_process"], rankings = {}, {}
    for mode, n in modes:
        out = run_probe(mode, dsn, args.schema, index_dir, qfile, n, index_dir.parent / f"probe-{mode}.json")
        rankings[mode] = out.pop("per_query", None)
        res["query_process"][mode] = out
        print(f"{mode}: {out}", flush=True)
        save()
    res["ranking_agreement"] = compare_rankings(rankings)
    save()


def main(argv=None) -> int:
    """Command line: see the module documentation."""
    ap = argparse.ArgumentParser(prog="python -m reproduce.bench.pg_scale", description=__doc__.split("\n")[0])
    ap.add_argument("--passages", type=int, default=150_000)
    ap.add_argument("--entities-per-passage", type=float, default=8.6)
    ap.add_argument("--facts-per-passage", type=float, default=9.0)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--batch", type=int, default=10_000, help="passages per write transaction")
    ap.add_argument("--queries", type=int, default=100,
                    help="HNSW queries per store, and queries of the engine-lazy query process")
    ap.add_argument("--exact-queries", type=int, default=20,
                    help="queries timed on PostgreSQL's exact scan, and of the engine-exact/engine-memory processes")
    ap.add_argument("--skip-memory-probe", action="store_true",
                    help="no engine-memory query process (every vector mirrored: 5+ GB at 150k passages)")
    ap.add_argument("--work", default=None, help="folder for the data directory and the index folder "
                    "(default: a temp folder)")
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
    index_dir = work / "index"
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
        content = load_index(db, stores, bases, args, rng, res, save)
        write_graph(db, content, index_dir, ENCODER_NAME, args.dim, res, save)
        queries = {s: synth(rng, bases[s][0], args.queries) for s in QUERY_STORES}
        sample = content.pop("sample")
        res["neighbour_profile"] = {s: {"synthetic": profile(sample[s], queries[s][:50]),
                                        "real_base": profile(bases[s][0], synth(rng, bases[s][0], 50))}
                                    for s in QUERY_STORES}
        del content, sample
        gc.collect()
        build_hnsw(stores, res, save)
        bench_queries(db, stores, queries, args, res, save)
        res["disk"] = disk(db, work / "pg")
        save()
        db.close()
        del stores
        gc.collect()
        qfile = work / "queries.npz"
        np.savez(qfile, fact=queries["fact"], passage=queries["passage"])
        query_processes(dsn, args, index_dir, qfile, res, save)
        res["finished"] = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
        save()
        print(json.dumps({k: res[k] for k in ("query_process", "ranking_agreement")}, indent=1), flush=True)
    finally:
        server.stop()
        if not args.keep:
            shutil.rmtree(work / "pg", ignore_errors=True)
            shutil.rmtree(index_dir, ignore_errors=True)
            if not args.work:
                shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
