"""What follows the graph in a run of :mod:`reproduce.bench.pg_scale` (:func:`finish`), and
``pg-scale --resume`` (:func:`resume`): finish a ``--keep`` run of :mod:`reproduce.bench.pg_scale` that stopped
after its graph (a run of hours at 1M passages can be killed in its HNSW builds).

The loaded tables (``--work``/pg) and ``graph.npz`` (``--work``/index) are reused with the load and
graph figures already in ``--out``; the rest runs as in a whole run (:func:`finish`): HNSW
builds (``--maintenance-work-mem`` may differ from the first run's: the result's ``settings`` and
``resumed`` say which held), store queries, disk, query processes, writer. The original run's
query vectors and its load-time sample of vectors were not kept, so the queries are drawn anew from
the base (same distribution, generator seeded ``--seed`` + 1) and the neighbour profile's
synthetic side is a page sample of the stored vectors (``TABLESAMPLE SYSTEM``)."""
from __future__ import annotations

import argparse
import gc
import json
import shlex
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from .pg_scale_base import choose_bases
from .pg_scale_data import PROFILE_ROWS, QUERY_STORES, profile, synth
from .pg_scale_index import bench_queries, build_hnsw, disk
from .pg_scale_probe import load1
from .pg_scale_queries import SETTINGS, query_processes, result_saver
from .pg_scale_writer import writer_rss

GRAPH_FILE = "graph.npz"


def stored_sample(db, store, rows: int, seed: int) -> np.ndarray:
    """About ``rows`` vectors of ``store`` read from a page sample of its table (float32)."""
    total = max(1, len(store))
    pct = min(100.0, 100.0 * rows / total)
    with db.snapshot() as c:
        got = c.execute(f"SELECT vec FROM {store.table} TABLESAMPLE SYSTEM (%s) REPEATABLE (%s)",
                        (pct, seed)).fetchall()
    return np.array([r[0].to_numpy() for r in got], np.float32).reshape(-1, store.dim)


def missing_parts(work: Path, out: Path) -> list[str]:
    """What a resumable run lacks (empty: it can be resumed)."""
    need = [work / "pg", work / "index" / GRAPH_FILE, out]
    missing = [str(p) for p in need if not p.exists()]
    if not missing:
        try:
            kept = json.loads(out.read_text())
        except (OSError, ValueError) as e:
            return [f"{out} (unreadable: {e})"]
        if "graph" not in kept:
            missing.append(f"{out}: the graph's figures (the run stopped before its graph)")
    return missing


def finish(db, stores: dict, queries: dict, dsn: str, args: argparse.Namespace, work: Path, res: dict, save) -> None:
    """What follows the graph: HNSW builds and store queries (unless ``--skip-queries``), disk, the
    query processes and the writer; ``db`` is closed on the way."""
    if not args.skip_queries:
        build_hnsw(stores, res, save)
        bench_queries(db, stores, queries, args, res, save)
    res["disk"] = disk(db, work / "pg")
    save()
    db.close()
    stores.clear()
    gc.collect()
    if not args.skip_queries:
        qfile = work / "queries.npz"
        np.savez(qfile, fact=queries["fact"], passage=queries["passage"])
        query_processes(dsn, args, work / "index", qfile, res, save)
    if args.writer_rss:
        def keep(rec: dict) -> None:
            res["writer"] = rec
            save()
        writer_rss(dsn, args.schema, work / "index", args.writer_rss, save=keep)
    res["finished"] = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    save()
    print(json.dumps({k: res[k] for k in ("query_process", "ranking_agreement", "writer") if k in res},
                     indent=1), flush=True)


def resume(args: argparse.Namespace, argv: Sequence[str] = ()) -> int:
    """Finish the run kept in ``--work`` whose figures are in ``--out`` (see the module documentation)."""
    from hippo_engine.store.postgres.db import PostgresIndexStore
    from hippo_engine.store.postgres.server import EmbeddedPostgres

    work, out = Path(args.work or ""), Path(args.out)
    missing = missing_parts(work, out) if args.work else ["--work"]
    if missing:
        print(f"pg-scale --resume: needs --work of a run made with --keep that got past its graph, and its --out; "
              f"missing: {', '.join(missing)}", file=sys.stderr)
        return 2
    argv = [a for a in argv if a != "pg-scale"]
    res = json.loads(out.read_text())
    settings = {**SETTINGS, **res.get("settings", {}), "maintenance_work_mem": args.maintenance_work_mem}
    res["settings"] = settings
    res.setdefault("resumed", []).append({
        "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "command": " ".join(["python -m reproduce pg-scale", shlex.join(argv)]).strip(),
        "maintenance_work_mem": args.maintenance_work_mem, "load": load1(),
        "kept": [k for k in ("base", "load", "graph") if k in res],
        "drawn_anew": "query vectors (generator seeded --seed + 1); the neighbour profile's synthetic side from a "
                      "page sample of the stored vectors"})
    for k in ("hnsw_build", "queries", "disk", "query_process", "ranking_agreement", "writer", "finished"):
        res.pop(k, None)
    rng = np.random.default_rng(args.seed + 1)
    bases, _ = choose_bases(args, work, rng, log=lambda m: print(m, flush=True))
    save = result_saver(res, out, args.project)
    server = EmbeddedPostgres(work / "pg", settings=settings)
    try:
        dsn = server.start()
        db = PostgresIndexStore(dsn, args.schema)
        stores = {s: db.embedding_store(s, args.dim, vector_dtype="float16", mirror=False) for s in QUERY_STORES}
        queries = {s: synth(rng, bases[s][0], args.queries) for s in QUERY_STORES}
        res["neighbour_profile"] = {
            s: {"synthetic": profile(stored_sample(db, stores[s], PROFILE_ROWS, args.seed), queries[s][:50]),
                "real_base": profile(bases[s][0], synth(rng, bases[s][0], 50))}
            for s in QUERY_STORES}
        save()
        finish(db, stores, queries, dsn, args, work, res, save)
    finally:
        server.stop()
    return 0
