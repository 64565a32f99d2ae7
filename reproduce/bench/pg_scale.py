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
import os
import shlex
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ..common import MUSIQUE_TRAIN_DIR, RESULTS_DIR, module_main
from .pg_scale_base import (
    BASE_DIR,
    BASE_MARKER,
    build_base,
    choose_bases,
    load_bases,
    make_base,
    mixture_bases,
    unit,
)
from .pg_scale_data import (
    PREDICATE,
    PROFILE_ROWS,
    QUERY_STORES,
    batch_content,
    fact_endpoints,
    load_index,
    profile,
    synth,
    triple_columns,
)
from .pg_scale_index import INDEX_VERSION, bench_queries, build_hnsw, disk, write_graph
from .pg_scale_probe import ENCODER_NAME, STORES
from .pg_scale_queries import (
    MEMORY_PROBE_OVERHEAD,
    SETTINGS,
    available_mib,
    memory_probe_skip,
    query_processes,
    rerun_queries,
    result_saver,
)
from .pg_scale_resume import finish, resume

# the phases live in pg_scale_base (the base), pg_scale_data (synthetic rows and their load),
# pg_scale_index (graph, HNSW, store queries, disk) and pg_scale_queries (the query processes);
# their names stay importable from here
__all__ = ["BASE_DIR", "BASE_MARKER", "ENCODER_NAME", "INDEX_VERSION", "MEMORY_PROBE_OVERHEAD", "OUT", "PREDICATE",
           "PROFILE_ROWS", "QUERY_STORES", "SETTINGS", "STORES", "add_arguments", "available_mib", "batch_content",
           "bench_queries", "build_base", "build_hnsw", "choose_bases", "disk", "fact_endpoints", "load_bases",
           "load_index", "main", "make_base", "memory_probe_skip", "mixture_bases", "profile", "query_processes",
           "rerun_queries", "run", "synth", "triple_columns", "unit", "write_graph"]

OUT = RESULTS_DIR / "pg_scale" / "scale.json"


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
                         "engine-exact, and engine-memory where it fits; engine-lazy-floor100, engine-lazy with "
                         "postgres_floor_ef_search=100, only when named)")
    ap.add_argument("--queries-only", action="store_true",
                    help="rerun only the query processes on the index a run with --keep left in --work, adding "
                         "them to the result in --out (the build's figures are kept)")
    ap.add_argument("--resume", action="store_true",
                    help="finish a --keep run in --work that stopped after its graph (killed in an HNSW build): "
                         "the kept load and graph figures of --out stay, the rest is run again (queries drawn anew)")
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
    if args.resume:
        return resume(args, argv)
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
    save = result_saver(res, out, args.project)
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
        finish(db, stores, queries, dsn, args, work, res, save)
    finally:
        server.stop()
        if not args.keep:
            shutil.rmtree(work / "pg", ignore_errors=True)
            shutil.rmtree(index_dir, ignore_errors=True)
            (work / "queries.npz").unlink(missing_ok=True)
            if not args.work:
                shutil.rmtree(work, ignore_errors=True)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m {__name__}``: the same as ``python -m reproduce pg-scale``."""
    return module_main(sys.modules[__name__], argv)


if __name__ == "__main__":
    sys.exit(main())
