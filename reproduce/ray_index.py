"""Indexing on a local Ray cluster vs one process (issue 26 point 3): NarrativeQA into PostgreSQL.

    python -m reproduce ray-index [--limit N] [--workers 2] [--kills 5] [--batch-size 64] [--work DIR]

One embedded PostgreSQL server holds three indexes (``extractor="ner"``, no LLM) of the same corpus
(NarrativeQA, 4,111 chunks; ``--limit`` takes the first N):

1. ``single``: ``HippoRAG.index(docs)`` in this process (models loaded before the clock starts);
2. ``ray``: the same call with ``executor=RayExecutor(...)`` on a :class:`LocalCluster` of a head and
   ``--workers`` worker nodes of one CPU each, every process bound to 127.0.0.1 (the wall time
   includes starting the workers' actors and loading their models);
3. ``ray_kills``: as 2, while a thread SIGKILLs ``--kills`` of the indexing worker processes, one
   every ``--kill-every`` seconds (default: the ray run's time over kills + 1).

Reported: passages/s of each run in the same process, the per-worker rates (passages per busy second
of each worker process), the writer's commits (count, seconds, passages per commit-second), the
kills, and a projection to N machines; then the three indexes, reopened, compared with
:func:`~hippo_engine.index.diagnostics.diff_snapshots` (stores, graph, synonymy, documents) and by a
rankings hash (top 20 of ``--queries`` queries: the first sentence of evenly spaced chunks; ids and
float.hex scores, as ``reproduce rankings`` hashes them). Also checked: every socket of the cluster
listened on 127.0.0.1 only, and no process of it is left at the end.
Written to ``reproduce/results/ray/README.md`` (``subset-<N>.md`` with ``--limit``) and ``.json``.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shlex
import shutil
import signal
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from .common import RESULTS_DIR, git_head, load_average, setup_logging, write_result

CORPUS = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "narrativeqa" / \
    "narrativeqa_dev_10_doc_corpus.json"
OUT_DIR = RESULTS_DIR / "ray"
MACHINES = (1, 2, 4, 8, 16, 32, 64)


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The ``ray-index`` command's options."""
    ap.add_argument("--corpus", type=Path, default=CORPUS, help="a JSON list of {title, text} (default NarrativeQA)")
    ap.add_argument("--limit", type=int, default=None, help="only the first N chunks (a documented subset)")
    ap.add_argument("--workers", type=int, default=2, help="worker nodes (one CPU each; default 2)")
    ap.add_argument("--kills", type=int, default=5, help="worker processes SIGKILLed in the third run (default 5)")
    ap.add_argument("--kill-every", type=float, default=None, help="seconds between kills (default: see above)")
    ap.add_argument("--batch-size", type=int, default=64, help="passages per worker batch (default 64)")
    ap.add_argument("--queries", type=int, default=100, help="queries of the rankings hash (default 100)")
    ap.add_argument("--work", type=Path, default=Path("outputs/reproduce/ray_index"), help="index folders (emptied)")
    ap.add_argument("--out", type=Path, default=None, help="report path (default reproduce/results/ray/...)")
    ap.add_argument("--compare-only", action="store_true",
                    help="only the comparison, on the indexes of an earlier run in --work (its runs.json)")
    ap.add_argument("--search", choices=("hnsw", "exact"), default="hnsw",
                    help="how the rankings are read from PostgreSQL (default hnsw, the engine's default)")


def load_docs(path: Path, limit: int | None) -> list[str]:
    data = json.loads(path.read_text(encoding="utf-8"))
    docs = [f"{d['title']}\n{d['text']}" for d in data]
    return docs[:limit] if limit else docs


def probe_queries(docs: Sequence[str], n: int) -> list[str]:
    """The first sentence of ``n`` evenly spaced chunks (the corpus has no questions here)."""
    step = max(1, len(docs) // max(1, n))
    out = []
    for d in docs[::step]:
        first = d.split("\n", 1)[-1].split(". ")[0][:300].strip()
        if first:
            out.append(first)
    return out[:n]


def rankings_hash(rag, queries: Sequence[str]) -> str:
    """SHA-256 (16 hex digits) of each query's top 20 as [passage id, float.hex(score)]."""
    from hippo_engine.ids import chunk_id
    sols = rag.retrieve(list(queries), num_to_retrieve=20)
    payload = [[[chunk_id(d), float(s).hex()] for d, s in zip(q.docs, q.doc_scores, strict=True)] for q in sols]
    blob = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


class Killer(threading.Thread):
    """SIGKILLs ``kills`` indexing worker processes of ``cluster``, one every ``every`` seconds."""

    def __init__(self, cluster, kills: int, every: float):
        super().__init__(name="ray-killer", daemon=True)
        self.cluster, self.kills, self.every = cluster, kills, every
        self.done: list[dict] = []
        self.stop = threading.Event()
        self.t0 = time.perf_counter()

    def run(self) -> None:
        while len(self.done) < self.kills and not self.stop.wait(self.every):
            procs = self.cluster.worker_processes("ExtractEncodeWorker")
            if not procs:
                continue
            victim = procs[len(self.done) % len(procs)]
            try:
                victim.send_signal(signal.SIGKILL)
            except Exception:   # noqa: BLE001 - gone meanwhile: try the next round
                continue
            self.done.append({"at_s": round(time.perf_counter() - self.t0, 1), "pid": victim.pid})


def _open(folder: Path, dsn: str, **kw):
    from hippo_engine import HippoRAG
    return HippoRAG(folder, dsn=dsn, extractor="ner", show_progress=False, **kw)


def run_single(work: Path, dsn: str, docs: list[str]) -> dict:
    rag = _open(work / "single", dsn)
    _ = rag.encoder
    rag.ner.pipeline()              # models loaded before the clock starts
    t = time.perf_counter()
    rep = rag.index(docs)
    s = time.perf_counter() - t
    rag.close()
    return {"seconds": round(s, 1), "passages": rep["added"], "passages_per_s": round(rep["added"] / s, 2),
            "load": load_average()}


def run_ray(work: Path, name: str, dsn: str, docs: list[str], cluster, batch_size: int, killer=None) -> dict:
    from hippo_engine.index.distributed import RayExecutor
    ex = RayExecutor(cluster.address, batch_size=batch_size)
    rag = _open(work / name, dsn, executor=ex)
    if killer is not None:
        killer.t0 = time.perf_counter()
        killer.start()
    t = time.perf_counter()
    rep = rag.index(docs)
    s = time.perf_counter() - t
    if killer is not None:
        killer.stop.set()
    again = rag.index(docs)                       # a rerun skips what is committed
    rag.close()
    out = {"seconds": round(s, 1), "passages": rep["added"], "passages_per_s": round(rep["added"] / s, 2),
           "ray": rep["ray"], "writer_timings": {k: round(v, 2) for k, v in rep.get("timings", {}).items()},
           "rerun_added": again.get("added"), "load": load_average()}
    if killer is not None:
        out["kills"] = killer.done
    return out


def compare(work: Path, dsn: str, queries: list[str], search: str = "hnsw") -> dict:
    """The three indexes reopened: snapshot differences against ``single`` and rankings hashes."""
    from hippo_engine.index.diagnostics import diff_snapshots, snapshot_index
    snaps, hashes, sizes = {}, {}, {}
    for name in ("single", "ray", "ray_kills"):
        if not (work / name).exists():
            continue
        rag = _open(work / name, dsn, postgres_search=search)
        snaps[name] = snapshot_index(rag)
        hashes[name] = rankings_hash(rag, queries)
        sizes[name] = {k: len(snaps[name][k]) for k in ("passage", "entity", "fact")} | \
            {"edges": len(snaps[name]["edges"])}
        rag.close()
    diffs = {n: diff_snapshots(snaps["single"], s) for n, s in snaps.items() if n != "single"}
    return {"sizes": sizes, "diffs": diffs, "rankings_hash": hashes}


def projection(ray_run: dict, cores_per_machine: int = 16) -> list[dict]:
    """Passages/s on N machines: N x cores x the mean per-worker rate, capped by the writer's rate."""
    rates = [w["passages_per_s"] for w in ray_run["ray"]["per_worker"].values() if w["passages_per_s"]]
    per_core = sum(rates) / len(rates) if rates else 0.0
    writer = ray_run["ray"]["commit_passages_per_s"] or float("inf")
    out = []
    for n in MACHINES:
        workers = n * cores_per_machine * per_core
        out.append({"machines": n, "workers_passages_per_s": round(workers, 1),
                    "bound_by_writer": workers > writer, "passages_per_s": round(min(workers, writer), 1),
                    "hours_per_million": round(1e6 / min(workers, writer) / 3600, 2) if per_core else None})
    return out


def run(args: argparse.Namespace, argv: Sequence[str]) -> int:
    """Single process vs Ray vs Ray with kills, then the comparison; writes the report."""
    setup_logging()
    from hippo_engine.index.distributed import LocalCluster
    from hippo_engine.store.postgres import EmbeddedPostgres
    docs = load_docs(args.corpus, args.limit)
    if args.compare_only:
        return compare_only(args, argv, docs)
    shutil.rmtree(args.work, ignore_errors=True)
    args.work.mkdir(parents=True)
    if os.geteuid() == 0:
        args.work.chmod(0o711)
    server = EmbeddedPostgres(args.work / "pg")
    dsn = server.start()
    result: dict = {"command": "python -m reproduce " + shlex.join(argv), "documents": len(docs),
                    "workers": args.workers, "batch_size": args.batch_size, "queries": args.queries,
                    "load_before": load_average(), "commit": (git_head() or [None])[0]}
    try:
        result["single"] = run_single(args.work, dsn, docs)
        print("single:", json.dumps(result["single"]), flush=True)
        with LocalCluster(args.workers) as cluster:
            result["listeners"] = sorted({ip for ip, _, _ in cluster.listeners()})
            result["ray"] = run_ray(args.work, "ray", dsn, docs, cluster, args.batch_size)
            print("ray:", json.dumps(result["ray"]), flush=True)
            if args.kills:
                every = args.kill_every or max(2.0, result["ray"]["seconds"] / (args.kills + 1))
                killer = Killer(cluster, args.kills, every)
                result["ray_kills"] = run_ray(args.work, "ray_kills", dsn, docs, cluster, args.batch_size, killer)
                print("ray_kills:", json.dumps(result["ray_kills"]), flush=True)
            result["listeners"] = sorted(set(result["listeners"]) | {ip for ip, _, _ in cluster.listeners()})
            seen = cluster.processes()
        result["left_running"] = [p.pid for p in seen if p.is_running() and p.status() != "zombie"]
        write_result(args.work / "runs.json", json.dumps(result, indent=2))
        result["compare"] = compare(args.work, dsn, probe_queries(docs, args.queries), args.search)
        result["projection"] = projection(result["ray"])
    finally:
        server.stop()
    return finish(args, result)


def compare_only(args: argparse.Namespace, argv: Sequence[str], docs: list[str]) -> int:
    """The comparison (and report) of an earlier run's indexes, its runs read from ``<work>/runs.json``."""
    from hippo_engine.store.postgres import EmbeddedPostgres
    result = json.loads((args.work / "runs.json").read_text(encoding="utf-8"))
    result["compare_command"] = "python -m reproduce " + shlex.join(argv)
    server = EmbeddedPostgres(args.work / "pg")
    dsn = server.start()
    try:
        result["compare"] = compare(args.work, dsn, probe_queries(docs, args.queries), args.search)
        result["projection"] = projection(result["ray"])
    finally:
        server.stop()
    return finish(args, result)


def finish(args: argparse.Namespace, result: dict) -> int:
    """Write the report; 0 when the indexes are the same and nothing of the cluster is left running."""
    result["search"] = args.search
    result["load_after"] = load_average()
    head = git_head()
    result.setdefault("commit", head[0] if head else None)
    out = args.out or OUT_DIR / ("README.md" if not args.limit else f"subset-{args.limit}.md")
    write_result(out.with_suffix(".json"), json.dumps(result, indent=2))
    write_result(out, report(result))
    print(f"wrote {out}")
    same = all(not d for d in result["compare"]["diffs"].values()) and \
        len(set(result["compare"]["rankings_hash"].values())) == 1
    return 0 if same and not result.get("left_running") else 1


def report(r: dict) -> str:
    """The markdown report."""
    ray, c = r["ray"], r["compare"]
    lines = [f"# Indexing on a local Ray cluster: {r['documents']:,} NarrativeQA chunks into PostgreSQL", "",
             f"Command: `{r['command']}`" +
             (f", comparison: `{r['compare_command']}`" if "compare_command" in r else "") +
             f" (commit {r['commit']}); load before {r['load_before']}, after "
             f"{r['load_after']}. One machine of 2 cores shared with other work: the cluster is a head and "
             f"{r['workers']} worker nodes of 1 CPU each on 127.0.0.1, so no speed-up is expected here; the "
             f"point is that the work is spread and the index is the same.", "",
             "| run | seconds | passages | passages/s | load after |", "|---|---:|---:|---:|---|"]
    for name in ("single", "ray", "ray_kills"):
        if name in r:
            x = r[name]
            lines.append(f"| {name} | {x['seconds']} | {x['passages']:,} | {x['passages_per_s']} | {x['load']} |")
    lines += ["", f"Ray wall time includes starting the actors and loading their models; the single process had its "
              f"models loaded. Rerun of each Ray index (committed passages skipped): added "
              f"{ray['rerun_added']}.", "", "## Per worker (ray run)", "",
              "| worker (node:pid) | batches | passages | busy s | passages per busy s |", "|---|---:|---:|---:|---:|"]
    for w, v in ray["ray"]["per_worker"].items():
        lines.append(f"| {w} | {v['batches']} | {v['passages']} | {v['busy_s']} | {v['passages_per_s']} |")
    st = ray["ray"]
    lines += ["", f"Writer (this process): {st['commits']} commits, {st['committed_passages']:,} passages in "
              f"{st['commit_s']} s of commits = {st['commit_passages_per_s']} passages per commit-second; "
              f"vectors encoded in the driver (no worker's): {st['driver_encoded']}; duplicate rows ignored: "
              f"{st['duplicates_ignored']}; search indexes (HNSW) built after the last commit: "
              f"{st.get('search_index_s', 'during the commits')} s. The writer's stages over all commits (s): " +
              ", ".join(f"{k} {v}" for k, v in sorted(ray["writer_timings"].items(), key=lambda kv: -kv[1])[:8]) +
              ".", ""]
    if "ray_kills" in r:
        k = r["ray_kills"]
        lines += [f"## {len(k['kills'])} worker kills", "",
                  "SIGKILL of an indexing worker process (Ray restarts the actor and reruns its batch): " +
                  ", ".join(f"pid {x['pid']} at {x['at_s']} s" for x in k["kills"]) +
                  f". Duplicate rows ignored: {k['ray']['duplicates_ignored']}; passages committed "
                  f"{k['ray']['committed_passages']:,} of {r['documents']:,} documents' passages.", ""]
    lines += ["## Same index", "", "Reopened, compared with the single-process index (stores with vectors, graph "
              "nodes and weighted edges, synonymy lists, documents) and by a rankings hash (top 20 of "
              f"{r['queries']} probe queries, postgres_search={r['search']}):", "",
              "| index | passages | entities | facts | edges | differences | rankings hash |",
              "|---|---:|---:|---:|---:|---|---|"]
    for name, size in c["sizes"].items():
        d = c["diffs"].get(name, [])
        lines.append(f"| {name} | {size['passage']:,} | {size['entity']:,} | {size['fact']:,} | {size['edges']:,} | "
                     f"{'none' if not d else '; '.join(d)} | {c['rankings_hash'][name]} |")
    lines += ["", f"Listening addresses of the cluster's processes: {', '.join(r['listeners'])}. Processes of the "
              f"cluster left running after stop: {len(r['left_running'])}.", "",
              "## Projection to N machines", "",
              "Per machine 16 cores, each a worker at the mean per-worker rate above (workers scale by "
              "machines; the single writer does not): throughput = min(N x 16 x rate, writer's commit rate).", "",
              "| machines | workers' passages/s | bound by the writer | passages/s | hours per 1M passages |",
              "|---:|---:|---|---:|---:|"]
    for p in r["projection"]:
        lines.append(f"| {p['machines']} | {p['workers_passages_per_s']} | {'yes' if p['bound_by_writer'] else 'no'} | "
                     f"{p['passages_per_s']} | {p['hours_per_million']} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit("run: python -m reproduce ray-index")
