"""``python -m reproduce serve-load``: ``hippo-engine serve`` under concurrent reads while documents come and go.

    python -m reproduce serve-load [--storage both|postgres|sqlite] [--requests 2000] [--clients 8]
                                   [--documents 200] [--overhead 100]
    python -m reproduce serve-load --throughput [--before CHECKOUT] [--levels 1,8,32] [--per-level 240]

The MuSiQue subset (1,890 passages) is indexed once per backend in-process (``extractor="ner"``: spaCy,
no LLM; recognition filter off) under ``<work>/index_<backend>``. Then ``hippo-engine serve`` runs over
it as a subprocess on a free port of 127.0.0.1 (PostgreSQL: 4 workers on the embedded server of the index
folder, which this harness holds so that it outlives the workers; SQLite: 1 worker). After a warm-up,
``--clients`` reader threads (httpx, one keep-alive connection each) send ``--requests`` ``POST
/retrieve`` between them (one query, ``top_k`` 5): a MuSiQue question in ``hipporag2`` mode, or with
probability ``--probe-share`` a probe, the text of an added document in ``naive`` mode. Meanwhile a writer
thread adds ``--documents`` 2WikiMultihopQA passages in batches (``POST /documents``), follows each job to
``done`` (``GET /jobs/{id}``) and deletes a batch once ``--delete-lag`` later batches are indexed (``POST
/documents/delete`` and ``DELETE /documents/{id}`` in turn), then the rest. Every request's latency is
measured by its client; every response is checked against the times of the writes
(:mod:`.serve_consistency`). The index is the base corpus again at the end (checked).

``--overhead N`` (SQLite run): N questions, each retrieved through HTTP (one query, idle server) and with
the same call in-process (``HippoRAG.retrieve`` on the same index folder, warm), in turn; p50 of each.
``--only-overhead``: the SQLite server and that measure alone (to repeat it on a quieter machine).

Writes ``reproduce/results/serve/load.md`` and ``load.json``; exits 1 on any failed check.

``--throughput``: the read-only throughput measure alone, at 1, 8 and 32 clients, this checkout's server and
``--before CHECKOUT``'s in the same run, every response checked against its single-request answer
(:mod:`.serve_throughput`; writes ``throughput.md`` and ``.json``).
"""
from __future__ import annotations

import argparse
import json
import logging
import random
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from . import serve_throughput
from .serve_consistency import Call, DocTimes, check_calls
from .serve_harness import (
    OUT_DIR,
    ServerProcess,
    build_index,
    command_line,
    full_text,
    hold_postgres,
    musique_documents,
    musique_questions,
    open_engine,
    pct,
    uptime,
    wiki_documents,
)
from .serve_report import render_load

#: seconds one request may take before it counts as failed
REQUEST_TIMEOUT = 120.0
#: requests sent before measuring (each worker loads the graph on its first query)
WARMUP = 32


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The ``serve-load`` command's options."""
    ap.add_argument("--storage", choices=("both", "postgres", "sqlite"), default="both",
                    help="which runs: postgres (4 workers), sqlite (1 worker) or both (default)")
    ap.add_argument("--postgres-workers", type=int, default=4, help="server processes on PostgreSQL (default 4)")
    ap.add_argument("--sqlite-workers", type=int, default=1, help="server processes on SQLite (default 1)")
    ap.add_argument("--requests", type=int, default=2000, help="retrieve requests per run (default 2000)")
    ap.add_argument("--clients", type=int, default=8, help="reader threads (default 8)")
    ap.add_argument("--documents", type=int, default=200, help="documents added and deleted per run (default 200)")
    ap.add_argument("--batch", type=int, default=10, help="documents per POST /documents (default 10)")
    ap.add_argument("--delete-lag", type=int, default=4, help="a batch is deleted once this many later batches "
                    "were indexed (default 4)")
    ap.add_argument("--probe-share", type=float, default=0.2, help="share of probe requests (default 0.2)")
    ap.add_argument("--top-k", type=int, default=5, help="passages per query (default 5)")
    ap.add_argument("--base", type=int, default=None, help="MuSiQue passages in the index (default all 1,890)")
    ap.add_argument("--overhead", type=int, default=100, help="questions of the HTTP overhead measure (SQLite "
                    "run; 0: skip; default 100)")
    ap.add_argument("--only-overhead", action="store_true", help="the SQLite server and the overhead measure only")
    ap.add_argument("--seed", type=int, default=23)
    ap.add_argument("--time-limit", type=float, default=1800.0, help="seconds a run's load may last (default 1800)")
    ap.add_argument("--work", type=Path, default=Path("outputs/serve/load"), help="indexes and server logs")
    ap.add_argument("--out", type=Path, default=OUT_DIR / "load.md", help="the report (and .json beside it)")
    serve_throughput.add_arguments(ap)


# ----------------------------------------------------------------------------- clients
class Shared:
    """What the writer tells the readers: the documents added so far and those seen indexed, not deleted."""

    def __init__(self, docs: dict[str, DocTimes]):
        self.docs = docs
        self.lock = threading.Lock()
        self.added: list[str] = []
        self.live: list[str] = []
        self.writing = True

    def probe_target(self, rng: random.Random) -> str | None:
        with self.lock:
            if self.live and rng.random() < 0.7:
                return rng.choice(self.live)
            return rng.choice(self.added) if self.added else None


def writer(url: str, batches: list[list[dict]], shared: Shared, deadline: float, out: dict, lag: int) -> None:
    """Add each batch, follow its job to done, delete the batch added ``lag`` batches before (then the rest)."""
    import httpx
    docs, errors = shared.docs, out.setdefault("writer_errors", [])
    out["write_start"] = time.monotonic()
    with httpx.Client(base_url=url, timeout=REQUEST_TIMEOUT) as c:
        pending: list[list[str]] = []
        for k, batch in enumerate(batches):
            ids = [d["id"] for d in batch]
            with shared.lock:
                for d in ids:
                    docs[d].add_sent = time.monotonic()
                shared.added.extend(ids)
            r = c.post("/documents", json={"documents": batch})
            if r.status_code != 202:
                errors.append(f"POST /documents: {r.status_code} {r.text[:300]}")
                continue
            for d in ids:
                docs[d].add_ok = time.monotonic()
            if not _follow(c, r.json()["job_id"], ids, shared, deadline, errors):
                break
            pending.append(ids)
            if len(pending) > lag:
                _delete(c, pending.pop(0), k, shared, errors)
        for k, ids in enumerate(pending):
            _delete(c, ids, k, shared, errors)
    out["write_end"] = time.monotonic()
    shared.writing = False


def _follow(c, job_id: str, ids: list[str], shared: Shared, deadline: float, errors: list[str]) -> bool:
    """Poll the job until done; record when it was seen indexed. False on failure or timeout."""
    while time.monotonic() < deadline:
        r = c.get(f"/jobs/{job_id}")
        seen = time.monotonic()
        if r.status_code != 200:
            errors.append(f"GET /jobs: {r.status_code} {r.text[:300]}")
            return False
        job = r.json()
        if job["status"] == "done":
            with shared.lock:
                for d in ids:
                    shared.docs[d].indexed_seen = seen
                shared.live.extend(ids)
            return True
        if job["status"] == "failed":
            errors.append(f"job {job_id} failed: {job['documents']}")
            return False
        time.sleep(0.05)
    errors.append(f"job {job_id} not done before the time limit")
    return False


def _delete(c, ids: list[str], k: int, shared: Shared, errors: list[str]) -> None:
    """Delete a batch: by the batch route (even ``k``) or one DELETE per document (odd)."""
    with shared.lock:
        for d in ids:
            shared.docs[d].delete_sent = time.monotonic()
            shared.live.remove(d)
    groups = [ids] if k % 2 == 0 else [[d] for d in ids]
    for group in groups:
        r = c.post("/documents/delete", json={"ids": group}) if len(group) > 1 else \
            c.delete(f"/documents/{group[0]}")
        done = time.monotonic()
        if r.status_code != 200 or sorted(r.json().get("deleted", [])) != sorted(group):
            errors.append(f"delete {group}: {r.status_code} {r.text[:300]}")
            continue
        for d in group:
            shared.docs[d].delete_ok = done


def reader(url: str, seed: int, questions: list[str], shared: Shared, budget: list[int], lock: threading.Lock,
           args: argparse.Namespace, deadline: float, calls: list[Call]) -> None:
    """Send requests until the shared budget is spent (or the deadline passes)."""
    import httpx
    rng = random.Random(seed)
    with httpx.Client(base_url=url, timeout=REQUEST_TIMEOUT) as c:
        while time.monotonic() < deadline:
            with lock:
                if budget[0] <= 0:
                    return
                budget[0] -= 1
            target = shared.probe_target(rng) if rng.random() < args.probe_share else None
            if target is not None:
                call = Call(shared.docs[target].text, "naive", target, 0.0)
            else:
                call = Call(rng.choice(questions), "hipporag2", None, 0.0)
            calls.append(_send(c, call, args.top_k))


def _send(c, call: Call, top_k: int) -> Call:
    import httpx
    call.start = time.monotonic()
    try:
        r = c.post("/retrieve", json={"query": call.query, "top_k": top_k, "mode": call.mode})
    except httpx.HTTPError as e:
        call.end, call.error = time.monotonic(), f"{type(e).__name__}: {e}"
        return call
    call.end, call.status = time.monotonic(), r.status_code
    if r.status_code == 200:
        call.passages = r.json()["results"][0]["passages"]
    else:
        call.error = r.text[:300]
    return call


# ----------------------------------------------------------------------------- one run
def load_run(url: str, base: list[dict], added: list[dict], questions: list[str], args: argparse.Namespace) -> dict:
    """Readers and the writer at once; returns latencies, throughput and the check's report."""
    docs = {d["id"]: DocTimes(full_text(d)) for d in added}
    shared = Shared(docs)
    batches = [added[i:i + args.batch] for i in range(0, len(added), args.batch)]
    deadline = time.monotonic() + args.time_limit
    calls: list[Call] = []
    budget, lock = [args.requests], threading.Lock()
    wout: dict = {}
    threads = [threading.Thread(target=writer, args=(url, batches, shared, deadline, wout, args.delete_lag),
                                name="writer")]
    threads += [threading.Thread(target=reader, args=(url, args.seed * 1000 + i, questions, shared, budget, lock,
                                                      args, deadline, calls), name=f"reader-{i}")
                for i in range(args.clients)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads[1:]:
        t.join()
    reads_s = time.monotonic() - t0
    threads[0].join(max(1.0, deadline - time.monotonic()))
    base_map = {full_text(d): d["id"] for d in base}
    rep = check_calls(calls, docs, base_map, args.top_k)
    ok = [c.end - c.start for c in calls if c.status == 200]
    during = [c for c in calls if wout.get("write_start", 0) <= c.start <= wout.get("write_end", 0)]
    ok_during = [c.end - c.start for c in during if c.status == 200]
    ok_after = [c.end - c.start for c in calls if c.status == 200 and c not in during]
    return {"requests": len(calls), "read_seconds": reads_s, "requests_per_s": len(calls) / reads_s,
            "latency_ms": {f"p{q}": 1000 * pct(ok, q) for q in (50, 95, 99)} | {"max": 1000 * max(ok, default=0)},
            "latency_ms_by_mode": {m: {f"p{q}": 1000 * pct([c.end - c.start for c in calls
                                                            if c.status == 200 and c.mode == m], q) for q in (50, 95)}
                                   for m in ("hipporag2", "naive")},
            "requests_during_writes": len(during),
            "latency_ms_during_writes": {f"p{q}": 1000 * pct(ok_during, q) for q in (50, 95)},
            "latency_ms_without_writes": {f"p{q}": 1000 * pct(ok_after, q) for q in (50, 95)},
            "write_seconds": wout.get("write_end", float("nan")) - wout.get("write_start", float("nan")),
            "documents_added": sum(t.add_ok is not None for t in docs.values()),
            "documents_seen_indexed": sum(t.indexed_seen is not None for t in docs.values()),
            "documents_deleted": sum(t.delete_ok is not None for t in docs.values()),
            "writer_errors": wout.get("writer_errors", []), "check": rep.as_dict(),
            "writer_alive": threads[0].is_alive()}


def warm_up(url: str, questions: list[str], clients: int) -> None:
    """:data:`WARMUP` requests from ``clients`` threads (not measured)."""
    import httpx

    def one(i: int) -> None:
        with httpx.Client(base_url=url, timeout=REQUEST_TIMEOUT) as c:
            for j in range(WARMUP // clients):
                c.post("/retrieve", json={"query": questions[(i * 7 + j) % len(questions)], "top_k": 5})
    ts = [threading.Thread(target=one, args=(i,)) for i in range(clients)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()


def overhead(url: str, save: Path, storage: str, questions: list[str], n: int, top_k: int) -> dict:
    """p50 of one retrieve through HTTP and of the same ``HippoRAG.retrieve`` call in-process (same index
    folder, warmed by one pass), the two taken in turn per question."""
    import httpx
    rag = open_engine(save, storage)
    qs = [questions[i % len(questions)] for i in range(n)]
    http_s, local_s = [], []
    try:
        with httpx.Client(base_url=url, timeout=REQUEST_TIMEOUT) as c:
            for q in qs[: min(20, n)]:
                rag.retrieve([q], top_k)
                c.post("/retrieve", json={"query": q, "top_k": top_k})
            for q in qs:
                t = time.perf_counter()
                r = c.post("/retrieve", json={"query": q, "top_k": top_k, "mode": "hipporag2"})
                http_s.append(time.perf_counter() - t)
                if r.status_code != 200:
                    raise RuntimeError(f"overhead: POST /retrieve answered {r.status_code}: {r.text[:300]}")
                t = time.perf_counter()
                rag.retrieve([q], top_k)
                local_s.append(time.perf_counter() - t)
    finally:
        rag.close()
    diffs = [h - m for h, m in zip(http_s, local_s, strict=True)]
    return {"questions": n, "http_p50_ms": 1000 * pct(http_s, 50), "in_process_p50_ms": 1000 * pct(local_s, 50),
            "difference_of_p50_ms": 1000 * (pct(http_s, 50) - pct(local_s, 50)),
            "p50_of_differences_ms": 1000 * pct(diffs, 50)}


def run_storage(storage: str, workers: int, args: argparse.Namespace, log=print) -> dict:
    """One backend: build (or reuse) the index, serve it, warm up, load it, check the index is the base again."""
    base = musique_documents(args.base)
    added = wiki_documents(args.documents, {full_text(d) for d in base}, prefix="load")
    questions = musique_questions()
    save = args.work / f"index_{storage}"
    log(f"{storage}: index of {len(base)} MuSiQue passages in {save}")
    built = build_index(save, base, storage, log)
    held = hold_postgres(save) if storage == "postgres" else None
    out: dict = {"storage": storage, "workers": workers, "index": built, "base_documents": len(base)}
    try:
        server = ServerProcess(save, args.work / f"server_{storage}.log", storage=storage, workers=workers)
        with server:
            out["startup_s"] = server.wait_ready()
            log(f"{storage}: {workers} worker(s) ready in {out['startup_s']:.1f} s; warming up")
            warm_up(server.url, questions, args.clients)
            out["uptime_before"] = uptime()
            if not args.only_overhead:
                out["load"] = load_run(server.url, base, added, questions, args)
                out["uptime_after"] = uptime()
                log(f"{storage}: {json.dumps(out['load']['check']['counts'])}")
            if storage == "sqlite" and args.overhead > 0:
                out["overhead"] = overhead(server.url, save, storage, questions, args.overhead, args.top_k)
                out["uptime_overhead"] = uptime()
        out["server_exit"] = server.proc.returncode if server.proc else None
        rag = open_engine(save, storage)
        try:
            out["index_is_base_again"] = sorted(rag.index_state.all_documents()) == sorted(d["id"] for d in base)
        finally:
            rag.close()
    finally:
        if held is not None:
            held.stop()
    return out


def failures(result: dict) -> list[str]:
    """Why a run failed its acceptance (empty: passed)."""
    if "load" not in result:
        return [] if result.get("index_is_base_again") else ["the index is not the base corpus at the end"]
    load, out = result["load"], []
    counts = load["check"]["counts"]
    if counts.get("violations", 0):
        out.append(f"{counts['violations']} violation(s)")
    if load["requests"] != result["requests_asked"]:
        out.append(f"{load['requests']} of {result['requests_asked']} requests sent")
    if load["writer_errors"] or load["documents_deleted"] != result["documents_asked"]:
        out.append(f"writer: {load['documents_deleted']} documents added and deleted; {load['writer_errors'][:3]}")
    if not result.get("index_is_base_again"):
        out.append("the index is not the base corpus at the end")
    return out


def run(args: argparse.Namespace, argv: Sequence[str]) -> int:
    """Run the asked backends, write the report, exit 1 on any failure."""
    from .common import setup_logging
    setup_logging()
    logging.getLogger("httpx").setLevel(logging.WARNING)      # not a line per request
    args.work.mkdir(parents=True, exist_ok=True)
    if args.throughput:
        return serve_throughput.run(args, argv)
    runs = [("postgres", args.postgres_workers), ("sqlite", args.sqlite_workers)]
    results = []
    for storage, workers in runs:
        if args.storage in ("both", storage) and (storage == "sqlite" or not args.only_overhead):
            r = run_storage(storage, workers, args)
            r.update(requests_asked=args.requests, documents_asked=args.documents)
            r["failures"] = failures(r)
            results.append(r)
    command = command_line("serve-load", argv, args.work)
    md, js = render_load(results, command, args), args.out.with_suffix(".json")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(md, encoding="utf-8")
    js.write_text(json.dumps({"command": command, "runs": results}, indent=1), encoding="utf-8")
    print(md)
    return 1 if any(r["failures"] for r in results) else 0


if __name__ == "__main__":
    import sys

    from .common import module_main
    sys.exit(module_main(sys.modules[__name__]))
