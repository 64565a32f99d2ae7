"""Scale benchmark of the PostgreSQL + pgvector backend: a synthetic index of ~1M+ vectors, queried
through the engine's own retrieval path.

    python -m reproduce pg-scale [--passages 150000] [--entities-per-passage 8.6]
        [--facts-per-passage 9] [--dim 384] [--seed 0] [--queries 100] [--exact-queries 20]
        [--skip-memory-probe] [--maintenance-work-mem 2GB] [--work DIR] [--keep] [--out JSON]
        [--base-index SQLITE ... | --mixture] [--data DIR] [--base-passages N]

(``python -m reproduce.bench.pg_scale`` takes the same arguments.) Needs the PostgreSQL extra.

0. The base: real all-MiniLM-L6-v2 vectors the synthetic rows are derived from. With
   ``--base-index``, existing SQLite indexes (every path that exists; ``index.sqlite`` of an
   engine folder). Otherwise the benchmark makes its own: the MuSiQue subset (``--data``, by
   default ``../shared/data/musique/hipporag_v1_train``: 1,890 passages and the released
   ``openie_*.json``) indexed with the engine's default encoder into ``<work>/base`` (SQLite
   backend, recognition filter off, OpenIE results imported from the file: no LLM call; in a
   child process, so the loader's memory figures do not include the encoder), then its
   ``index.sqlite`` is the base; ``--base-passages N`` indexes only the first N passages. A
   ``<work>/base`` made earlier (``base.json`` written beside ``index.sqlite`` once complete) is
   reused if it holds the passages asked for; an interrupted or smaller one is completed
   (indexing what is missing). Without ``--work`` the work folder is temporary, so pass
   ``--work DIR`` to build the base once. ``--mixture`` (tests): no real vectors, a gaussian
   mixture on the sphere. The result's ``base`` says which base was used and how it was made
   (``vectors_from``: the same in words).
1. Data, consistent the way the engine builds an index (``extractor="openie"``): entity ``n`` is
   the phrase ``"entity n"`` (entity store id ``entity_id(phrase)``, content the
   phrase); a fact is the triple ``(phrase_a, "related to", phrase_b)`` (fact store id
   ``triple_id(t)``, content ``fact_text(t)``), stated by one passage of its
   batch (``passage_triples`` rows hold the phrases, in the passage's order); passage ``n`` is
   ``"passage n: " + a real passage text`` (id ``chunk_id(text)``). Each batch's
   entities are the subjects of its facts (every entity is in the graph); objects are drawn from
   every entity written so far, so the graph links batches. Synonymy: one list per entity, one
   neighbour drawn from the entities written so far, score ``U(0.8, 1)``.
   Vectors (independent of the texts): from the real vectors of the base's entity, fact and
   passage stores (step 0), each synthetic row ``normalise(b_i + l * b_j + s * g / sqrt(dim))``
   with ``b_i, b_j`` two real vectors of the same store, ``l ~ U(0, 0.5)``, ``s ~ U(0.4, 0.8)``,
   ``g`` gaussian: a continuum around the real vectors rather than tight copies (the
   neighbour-score profile is reported beside the real one's); with ``--mixture``, around the
   mixture's centres.
2. Load into an embedded PostgreSQL through the engine's classes (``PostgresIndexStore``,
   ``embedding_store(..., vector_dtype="float16", mirror=False)``: a writer's stores, ids only in
   memory; ``upsert``: binary COPY), batches of
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
   (``postgres_search="hnsw"``, ``--queries`` queries; the default ``ppr_solver="auto"``: forward
   push from ``ppr_push_min_nodes`` graph nodes on), ``engine-exact-ppr`` (the same with
   ``ppr_solver="exact"``: the exact PPR kernel, ``--exact-queries`` queries), ``engine-exact``
   (``"exact"``: exact scans in the database, ``--exact-queries`` queries) and, unless
   ``--skip-memory-probe``, ``engine-memory`` (``"memory"``: every vector mirrored, as the engine
   opened an index before the lazy reader; 5+ GB at 150k passages; ``--exact-queries`` queries),
   skipped with the reason in the report when its projected peak (every vector as float32 times
   :data:`MEMORY_PROBE_OVERHEAD`) exceeds the memory available. Each reports open and
   retriever times, resident memory after each step, peak memory (``VmHWM``), latency p50/p95
   and the retriever's memory by part (passage matrix, fact ids, graph arrays, node ids, PPR
   kernel). Rankings are compared per pair of modes: top-10 passage overlap and recall@10 of the
   first against the second (e.g. the fast PPR path against exact PPR), and the fraction of
   queries whose top 10 and candidate facts (top 5) are identical.
   The query vectors are given to ``Retriever.search`` directly (a query is a pair of synthetic
   vectors: one around the real fact vectors for fact scoring, one around the real passage
   vectors for passage scoring), so the facade gets a stand-in encoder that has the index's
   model name and dimension and refuses to encode: encoding a query is outside what is
   measured here; everything after it is the engine's own path.
5. Disk (tables, indexes, data folder with WAL) and a projection to ``--project`` passages of
   the database and of the query process (each measured part of the retriever scaled with the
   rows), with whether the query process stays under 8 GiB, and where each part lives at that
   size (one database server or more, the graph in the query process).

Every timing carries the 1-minute load average. Results: ``--out`` (JSON, written after each
phase, with the command and the base), by default ``reproduce/results/pg_scale/scale.json``,
and ``README.md`` beside it (:mod:`reproduce.bench.pg_scale_report`, which also renders
hand-written ``notes`` of the JSON).
"""
from __future__ import annotations

import argparse
import gc
import json
import math
import os
import shlex
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ..common import MUSIQUE_TRAIN_DIR, REPO_ROOT, RESULTS_DIR, module_main
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
from .pg_scale_writer import writer_rss

OUT = RESULTS_DIR / "pg_scale" / "scale.json"
QUERY_STORES = ("fact", "passage")
SETTINGS = {"shared_buffers": "1GB", "maintenance_work_mem": "2GB", "max_wal_size": "2GB",
            "max_parallel_maintenance_workers": 1, "work_mem": "64MB"}
BASE_DIR = "base"
BASE_MARKER = "base.json"
PREDICATE = "related to"
INDEX_VERSION = "1"
PROFILE_ROWS = 200_000
#: engine-memory's peak over its float32 vectors at 150k passages (6,948 MiB peak / 4,087 MiB of vectors)
MEMORY_PROBE_OVERHEAD = 1.7


def unit(x: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length."""
    return x / np.linalg.norm(x, axis=1, keepdims=True)


# ---------------------------------------------------------------------------- the base
def _decode(blob: bytes, dim: int) -> np.ndarray | None:
    """A stored vector (float32 or float16 blob) as float32, or ``None`` if it is not ``dim``-dim."""
    if len(blob) == 4 * dim:
        return np.frombuffer(blob, np.float32)
    if len(blob) == 2 * dim:
        return np.frombuffer(blob, np.float16).astype(np.float32)
    return None


def load_bases(paths, dim: int) -> tuple[dict, list[str], list[str]]:
    """Real vectors and texts per store from SQLite indexes (float32 or float16 blobs),
    deduplicated; the paths read and the embedding models their meta names. An index whose meta
    gives another dimension is skipped. Raises ``ValueError`` when a store has no ``dim``-dim
    vector in any of them."""
    vecs = {s: [] for s in STORES}
    texts = {s: [] for s in STORES}
    used, models, other_dims = [], [], set()
    for p in paths:
        if not Path(p).is_file():
            continue
        db = sqlite3.connect(f"file:{p}?mode=ro", uri=True)
        try:
            meta = {}
            if db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'meta'").fetchone():
                meta = dict(db.execute("SELECT key, value FROM meta"))
            if meta.get("dim") and int(meta["dim"]) != dim:
                other_dims.add(int(meta["dim"]))
                continue
            for s in STORES:
                for content, blob in db.execute(f"SELECT content, vec FROM store_{s}"):
                    v = _decode(blob, dim)
                    if v is None:
                        other_dims.add(len(blob) // 4)
                        continue
                    vecs[s].append(v)
                    texts[s].append(content)
            if meta.get("embedding_model") and meta["embedding_model"] not in models:
                models.append(meta["embedding_model"])
        finally:
            db.close()
        used.append(str(p))
    empty = [s for s in STORES if not vecs[s]]
    if empty:
        seen = f" (vectors of {sorted(other_dims)} dimensions found)" if other_dims else ""
        raise ValueError(f"no {dim}-dim vectors in the {', '.join(empty)} store(s) of {', '.join(map(str, paths))}"
                         f"{seen}: check --dim and --base-index")
    out = {}
    for s in STORES:
        mat, idx = np.unique(np.stack(vecs[s]), axis=0, return_index=True)
        out[s] = (unit(mat.astype(np.float32)), [texts[s][i] for i in idx])
    return out, used, models


def build_base(dest: Path, data: Path = MUSIQUE_TRAIN_DIR, *, encoder=None, limit: int | None = None,
               log=print) -> dict:
    """Index the dataset ``data`` (its first ``limit`` passages, all by default) into ``dest``
    with the engine: SQLite backend, recognition filter off, its released OpenIE file imported
    (no LLM call), ``encoder`` (``None``: the engine's default encoder). Indexing is idempotent,
    so a partial ``dest`` is completed. Writes and returns the description ``dest/base.json``
    (written last: its presence means the base is complete)."""
    from hippo_engine.evaluation.datasets import load_dataset

    from .reliability import open_engine
    ds = load_dataset(data)
    if ds.openie_file is None:
        raise ValueError(f"{data}: no openie_*.json beside the dataset; the base is indexed with the released "
                         "OpenIE results (no LLM call)")
    docs = list(ds.docs)[:limit] if limit else list(ds.docs)
    resumed = (dest / "index.sqlite").is_file()
    log(f"base: indexing {len(docs)} passages of {ds.name} ({ds.openie_file.name}) into {dest}"
        + (" (resuming)" if resumed else ""))
    t = time.perf_counter()
    rag = open_engine(dest, encoder, storage="sqlite", extractor="openie")
    try:
        rag.import_openie(ds.openie_file)
        rep = rag.index(docs)
    finally:
        rag.close()
    db = sqlite3.connect(f"file:{dest / 'index.sqlite'}?mode=ro", uri=True)
    try:
        meta = dict(db.execute("SELECT key, value FROM meta"))
        rows = {s: db.execute(f"SELECT COUNT(*) FROM store_{s}").fetchone()[0] for s in STORES}
    finally:
        db.close()
    info = {"dataset": ds.name, "data": str(Path(data).resolve()), "openie": ds.openie_file.name,
            "passages": len(docs), "corpus_passages": len(ds.docs), "encoder": meta.get("embedding_model"),
            "dim": int(meta["dim"]) if meta.get("dim") else None, "storage": "sqlite", "use_filter": False,
            "llm_calls": 0, "rows": rows, "index_s": round(time.perf_counter() - t, 1), "resumed": resumed,
            "added": rep.get("added"), "made": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}
    (dest / BASE_MARKER).write_text(json.dumps(info, indent=1) + "\n")
    log(f"base: {info}")
    return info


def make_base(work: Path, data: Path, limit: int | None, log=print) -> dict:
    """``<work>/base``: reused when complete (``base.json``) with the passages asked for, else
    built, completed or grown to them by :func:`build_base` in a child process (the encoder's
    memory stays out of the loader's figures); a base of other data or more passages is an
    error."""
    dest = work / BASE_DIR
    marker = dest / BASE_MARKER
    if (dest / "index.sqlite").is_file() and marker.is_file():
        have = json.loads(marker.read_text())
        want = limit or have.get("corpus_passages")
        same_data = "data" not in have or Path(have["data"]) == Path(data).resolve()
        if same_data and have.get("passages") == want:
            log(f"base: reusing {dest / 'index.sqlite'}")
            return {"kind": "reused", **have}
        if not same_data or not want or have.get("passages", 0) > want:
            raise ValueError(f"{dest} holds a base of {have.get('passages')} passages of {have.get('data')}, not "
                             f"{want or 'all'} of {Path(data).resolve()}: pass another --work")
        log(f"base: {dest} holds {have.get('passages')} passages, completing it to {want}")
    marker.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "reproduce.bench.pg_scale", "--build-base-into", str(dest.resolve()),
           "--data", str(Path(data).resolve()), *(["--base-passages", str(limit)] if limit else [])]
    env = {**os.environ, "HF_HUB_OFFLINE": os.environ.get("HF_HUB_OFFLINE", "1"),
           "TRANSFORMERS_OFFLINE": os.environ.get("TRANSFORMERS_OFFLINE", "1")}
    r = subprocess.run(cmd, cwd=REPO_ROOT, env=env, check=False)
    if r.returncode or not marker.is_file():
        raise RuntimeError(f"building the base failed (exit status {r.returncode}): {shlex.join(cmd)}")
    return {"kind": "built", **json.loads(marker.read_text())}


def choose_bases(args, work: Path, rng, log=print) -> tuple[dict, dict]:
    """The base vectors (store -> (unit vectors, texts)) and the description of the base:
    ``--mixture``, else the ``--base-index`` files that exist, else ``<work>/base`` (made by
    :func:`make_base`)."""
    if args.mixture:
        return mixture_bases(rng, args.dim), {
            "kind": "mixture", "vectors_from": "a gaussian mixture on the sphere (--mixture: no real vectors)"}
    given = [str(p) for p in args.base_index or []]
    present = [p for p in given if Path(p).is_file()]
    missing = [p for p in given if not Path(p).is_file()]
    if missing:
        log(f"base: not found: {', '.join(missing)}")
    if present:
        info = {"kind": "given", "paths": present}
    else:
        info = make_base(work, Path(args.data), args.base_passages, log)
        info["paths"] = [str(work / BASE_DIR / "index.sqlite")]
    if missing:
        info["missing"] = missing
    bases, used, models = load_bases(info["paths"], args.dim)
    what = f"real {', '.join(models)} vectors" if models else "the vectors"
    if info["kind"] == "given":
        info["vectors_from"] = f"{what} of {', '.join(used)} (--base-index)"
    else:
        info["vectors_from"] = (f"{what} of {info['dataset']} ({info['passages']} passages, released OpenIE file "
                                f"{info['openie']}), indexed by the benchmark into {used[0]} "
                                f"({'reused' if info['kind'] == 'reused' else 'built'} by this run)")
    info["models"] = models
    return bases, info


# ---------------------------------------------------------------------------- synthetic vectors
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
    from hippo_engine.ids import chunk_id, entity_id, fact_id, fact_text
    e0, nb, nf, npas = first["entity"], counts["entity"], counts["fact"], counts["passage"]
    new_phrases = [f"entity {n}" for n in range(e0, e0 + nb)]
    new_eids = [entity_id(p) for p in new_phrases]
    phrases.extend(new_phrases)
    entity_ids.extend(new_eids)
    subj, obj = fact_endpoints(rng, e0, nb, nf)
    owner = rng.integers(0, npas, nf)
    order = np.argsort(owner, kind="stable")           # a passage's triples in fact order
    triples = [(phrases[s], PREDICATE, phrases[o]) for s, o in zip(subj[order].tolist(), obj[order].tolist(),
                                                                    strict=True)]
    owner = owner[order]
    ftexts = [fact_text(t) for t in triples]
    fids = [fact_id(t) for t in ftexts]
    ptxt_base = bases["passage"][1]
    ptexts = [f"passage {first['passage'] + i}: {ptxt_base[k]}"
              for i, k in enumerate(rng.integers(0, len(ptxt_base), npas).tolist())]
    pids = [chunk_id(t) for t in ptexts]
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
                   "loader_stores": "the loader writes through the engine writer's stores: ids in memory, no vectors",
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


def available_mib() -> float:
    """``MemAvailable`` of this machine (MiB)."""
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 1024
    return float("inf")  # pragma: no cover


def memory_probe_skip(vectors: int, dim: int, avail_mib: float) -> str | None:
    """Why the ``engine-memory`` process is not run (``None``: it is): its peak, every vector as
    float32 times :data:`MEMORY_PROBE_OVERHEAD` (measured at 150k passages), over the memory
    available now."""
    need = vectors * dim * 4 / 2**20 * MEMORY_PROBE_OVERHEAD
    if need <= avail_mib:
        return None
    return (f"its projected peak, {vectors:,} vectors x {dim} float32 x {MEMORY_PROBE_OVERHEAD} = {need / 1024:.1f} "
            f"GiB, exceeds the {avail_mib / 1024:.1f} GiB of memory available on this machine")


def query_processes(dsn: str, args, index_dir: Path, qfile: Path, res: dict, save, merge: bool = False) -> None:
    """The engine's query process in each mode (``--query-modes``: some), each in a fresh process, and the
    agreement of their rankings. ``merge``: keep the result's other modes (their rankings from their probe files)."""
    modes = [("engine-lazy", args.queries), ("engine-lazy-scan", args.queries),
             ("engine-exact-ppr", args.exact_queries), ("engine-exact", args.exact_queries)]
    chosen = getattr(args, "query_modes", None) or [m for m, _ in modes] + ["engine-memory"]
    modes = [m for m in modes if m[0] in chosen]
    res["query_process"] = dict(res.get("query_process", {})) if merge else {}
    rankings = {m: _probe_rankings(index_dir.parent / f"probe-{m}.json") for m in res["query_process"]}
    skip = memory_probe_skip(res.get("load", {}).get("vectors", 0), args.dim, available_mib())
    if args.skip_memory_probe:
        skip = "--skip-memory-probe"
    if "engine-memory" in chosen and skip:
        res["query_process"]["engine-memory"] = {"mode": "engine-memory", "skipped": skip}
        print(f"engine-memory: skipped ({skip})", flush=True)
    elif "engine-memory" in chosen:
        modes.append(("engine-memory", args.exact_queries))
    for mode, n in modes:
        batch = getattr(args, "exact_batch", 1) if mode == "engine-exact-ppr" else 1
        out = run_probe(mode, dsn, args.schema, index_dir, qfile, n, index_dir.parent / f"probe-{mode}.json", batch)
        rankings[mode] = out.pop("per_query", None)
        res["query_process"][mode] = out
        print(f"{mode}: {out}", flush=True)
        save()
    res["ranking_agreement"] = compare_rankings(rankings)
    save()


def _probe_rankings(path: Path) -> list | None:
    """The per-query rankings a probe wrote (None if it wrote none)."""
    try:
        return json.loads(path.read_text()).get("per_query")
    except (OSError, ValueError):
        return None


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The command's options (see the module documentation)."""
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
    ap.add_argument("--exact-batch", type=int, default=1, metavar="B",
                    help="engine-exact-ppr searches B queries per call (the exact reference's rankings, faster: "
                         "its kernel solves them on every core; no single-query latency is reported then)")
    ap.add_argument("--skip-queries", action="store_true",
                    help="no HNSW build, no store queries, no query processes (with --writer-rss: the writer only)")
    ap.add_argument("--writer-rss", type=int, default=200, metavar="N",
                    help="add N passages through the engine's writer, then delete them, each in a fresh process, "
                    "and report its peak memory (0: skip; default %(default)s)")
    ap.add_argument("--skip-memory-probe", action="store_true",
                    help="no engine-memory query process (every vector mirrored: 5+ GB at 150k passages; skipped "
                    "anyway, with the reason in the report, when its projected peak exceeds the available memory)")
    ap.add_argument("--work", default=None, help="folder for the base, the data directory and the index folder "
                    "(default: a temp folder, removed at the end); the PostgreSQL server's user must be able to "
                    "traverse its parents")
    ap.add_argument("--keep", action="store_true", help="keep the data directory (default: removed at the end)")
    ap.add_argument("--query-modes", nargs="+", default=None, metavar="MODE",
                    help="query processes to run (default: engine-lazy engine-lazy-scan engine-exact-ppr "
                         "engine-exact, and engine-memory where it fits)")
    ap.add_argument("--queries-only", action="store_true",
                    help="rerun only the query processes on the index a run with --keep left in --work, adding "
                         "them to the result in --out (the build's figures are kept)")
    base = ap.add_mutually_exclusive_group()
    base.add_argument("--base-index", nargs="+", default=None, metavar="SQLITE",
                      help="existing SQLite indexes (index.sqlite) whose vectors the synthetic ones derive from "
                      "(default: <work>/base, built from --data when missing)")
    base.add_argument("--mixture", action="store_true",
                      help="no real vectors: derive the synthetic ones from a gaussian mixture (tests)")
    ap.add_argument("--data", default=str(MUSIQUE_TRAIN_DIR),
                    help="dataset indexed into <work>/base when no --base-index exists (default %(default)s)")
    ap.add_argument("--base-passages", type=int, default=None,
                    help="index only the first N passages of --data into the base (default: all)")
    ap.add_argument("--maintenance-work-mem", default=SETTINGS["maintenance_work_mem"],
                    help="the server's maintenance_work_mem (default %(default)s): an HNSW build is much slower once "
                    "its graph outgrows it (about 1.4 KiB a row: 12.3 GiB for 9M facts; at 1M passages with 9GB "
                    "the fact build fell from 1,100-2,800 to 350 rows/s at 6.8M rows)")
    ap.add_argument("--project", type=int, default=1_000_000, help="passages of the projection")
    ap.add_argument("--out", default=str(OUT))
    ap.add_argument("--schema", default="scale", help="schema of the index")
    ap.add_argument("--build-base-into", default=None, help=argparse.SUPPRESS)


def run(args: argparse.Namespace, argv: Sequence[str] = ()) -> int:
    """Run the benchmark (or, with the internal ``--build-base-into DIR``, only build a base)."""
    if args.build_base_into:
        build_base(Path(args.build_base_into), Path(args.data), limit=args.base_passages)
        return 0
    if args.queries_only:
        return rerun_queries(args)
    from hippo_engine.store.postgres.db import PostgresIndexStore
    from hippo_engine.store.postgres.server import EmbeddedPostgres
    argv = list(argv)
    if argv and argv[0] == "pg-scale":
        argv = argv[1:]
    rng = np.random.default_rng(args.seed)
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="hippo-pgscale-"))
    work.mkdir(parents=True, exist_ok=True)
    if os.geteuid() == 0:
        work.chmod(0o711)
    index_dir = work / "index"
    try:
        bases, base = choose_bases(args, work, rng, log=lambda m: print(m, flush=True))
    except (ValueError, RuntimeError) as e:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)
        print(f"pg-scale: {e}", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    settings = {**SETTINGS, "maintenance_work_mem": args.maintenance_work_mem}
    res = {"command": " ".join(["python -m reproduce pg-scale", shlex.join(argv)]).strip(),
           "args": {k: v for k, v in vars(args).items() if k not in ("command", "build_base_into")},
           "base": base, "vectors_from": base["vectors_from"], "base_rows": {s: len(bases[s][1]) for s in STORES},
           "settings": settings, "cpus": os.cpu_count(), "started": time.strftime("%Y-%m-%d %H:%M:%S UTC",
                                                                                    time.gmtime())}

    def save() -> None:
        add_projection(res, args.project)
        out.write_text(json.dumps(res, indent=1) + "\n")
        out.with_name("README.md").write_text(render(res) + "\n")

    server = EmbeddedPostgres(work / "pg", settings=settings)
    try:
        dsn = server.start()
        db = PostgresIndexStore(dsn, args.schema)
        # the stores an engine writer uses: ids in memory, vectors only in the database
        stores = {s: db.embedding_store(s, args.dim, vector_dtype="float16", mirror=False) for s in STORES}
        content = load_index(db, stores, bases, args, rng, res, save)
        write_graph(db, content, index_dir, ENCODER_NAME, args.dim, res, save)
        queries = {s: synth(rng, bases[s][0], args.queries) for s in QUERY_STORES}
        sample = content.pop("sample")
        res["neighbour_profile"] = {s: {"synthetic": profile(sample[s], queries[s][:50]),
                                        "real_base": profile(bases[s][0], synth(rng, bases[s][0], 50))}
                                    for s in QUERY_STORES}
        del content, sample
        gc.collect()
        if not args.skip_queries:
            build_hnsw(stores, res, save)
            bench_queries(db, stores, queries, args, res, save)
        res["disk"] = disk(db, work / "pg")
        save()
        db.close()
        del stores
        gc.collect()
        if not args.skip_queries:
            qfile = work / "queries.npz"
            np.savez(qfile, fact=queries["fact"], passage=queries["passage"])
            query_processes(dsn, args, index_dir, qfile, res, save)
        if args.writer_rss:
            def keep(rec: dict) -> None:
                res["writer"] = rec
                save()
            writer_rss(dsn, args.schema, index_dir, args.writer_rss, save=keep)
        res["finished"] = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
        save()
        print(json.dumps({k: res[k] for k in ("query_process", "ranking_agreement", "writer") if k in res},
                         indent=1), flush=True)
    finally:
        server.stop()
        if not args.keep:
            shutil.rmtree(work / "pg", ignore_errors=True)
            shutil.rmtree(index_dir, ignore_errors=True)
            (work / "queries.npz").unlink(missing_ok=True)
            if not args.work:
                shutil.rmtree(work, ignore_errors=True)
    return 0


def rerun_queries(args: argparse.Namespace) -> int:
    """``--queries-only``: the query processes again on a kept index (``--work`` of a ``--keep`` run),
    written into the result of ``--out`` beside what the build measured."""
    from hippo_engine.store.postgres.server import EmbeddedPostgres
    work, out = Path(args.work or ""), Path(args.out)
    need = [work / "pg", work / "index", work / "queries.npz", out]
    missing = [str(p) for p in need if not p.exists()]
    if not args.work or missing:
        print(f"pg-scale --queries-only: needs --work of a run made with --keep and its --out; missing: "
              f"{', '.join(missing) or '--work'}", file=sys.stderr)
        return 2
    res = json.loads(out.read_text())
    res.setdefault("query_reruns", []).append({"started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
                                               "queries": args.queries, "exact_queries": args.exact_queries,
                                               "modes": args.query_modes, "load": load1()})

    def save() -> None:
        add_projection(res, args.project)
        out.write_text(json.dumps(res, indent=1) + "\n")
        out.with_name("README.md").write_text(render(res) + "\n")

    server = EmbeddedPostgres(work / "pg", settings={**SETTINGS, **res.get("settings", {})})
    try:
        query_processes(server.start(), args, work / "index", work / "queries.npz", res, save, merge=True)
    finally:
        server.stop()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m {__name__}``: the same as ``python -m reproduce pg-scale``."""
    return module_main(sys.modules[__name__], argv)


if __name__ == "__main__":
    sys.exit(main())
