"""The query processes of the PostgreSQL scale benchmark (:mod:`reproduce.bench.pg_scale`, step 4
of its documentation): each mode in a fresh process (:mod:`reproduce.bench.pg_scale_probe`), the
agreement of their rankings, and ``--queries-only``, which reruns them on a kept index."""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from .pg_scale_probe import load1, run_probe
from .pg_scale_projection import add_projection, compare_rankings
from .pg_scale_report import render

SETTINGS = {"shared_buffers": "1GB", "maintenance_work_mem": "2GB", "max_wal_size": "2GB",
            "max_parallel_maintenance_workers": 1, "work_mem": "64MB"}
#: engine-memory's peak over its float32 vectors at 150k passages (6,948 MiB peak / 4,087 MiB of vectors)
MEMORY_PROBE_OVERHEAD = 1.7


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
    modes.append(("engine-lazy-floor100", args.queries))      # a comparison: only when asked
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
    save = result_saver(res, out, args.project)
    server = EmbeddedPostgres(work / "pg", settings={**SETTINGS, **res.get("settings", {})})
    try:
        query_processes(server.start(), args, work / "index", work / "queries.npz", res, save, merge=True)
    finally:
        server.stop()
    return 0


def result_saver(res: dict, out: Path, project: int):
    """The function that writes ``res`` (with its projection to ``project`` passages) to ``out``
    and its report to ``README.md`` beside it."""
    def save() -> None:
        add_projection(res, project)
        out.write_text(json.dumps(res, indent=1) + "\n")
        out.with_name("README.md").write_text(render(res) + "\n")
    return save
