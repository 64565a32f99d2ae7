"""``python -m reproduce serve-overhead``: what the HTTP service adds to one retrieve.

The bundled sample corpus in a memory (``extractor="ner"``, the real embedder), served by real uvicorn on
127.0.0.1 with an access key (:func:`reproduce.serve_common.sample_service`). Each round takes one of the
sample questions and times, in turn (the order alternates round by round), the call in-process,
``Memory.retrieve([q], top_k=5)``, and the same call through HTTP, ``POST /retrieve`` with one keep-alive
httpx connection; both reach the same ``Memory`` object, warm, so the difference is the service: the
client, TCP on the loopback, uvicorn, the middleware (access key, body limit), FastAPI's validation
and serialisation. Both answers must rank the same passages. After ``--warmup`` rounds, ``--rounds``
rounds; reports p50 and p90 of each and the p50 of the per-round difference. On a busy machine the
ranking's own variation is as large as the difference, so the service is also timed alone: the memory
replays each question's recorded result (same payload, no ranking) behind the same HTTP route.

Writes ``reproduce/results/serve/overhead.json`` and ``overhead.md``.

Example:
    python -m reproduce serve-overhead --rounds 200
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

OUT = Path(__file__).parent / "results" / "serve"
KEY = "overhead-access-key"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--rounds", type=int, default=200, help="timed rounds (default 200)")
    p.add_argument("--warmup", type=int, default=20, help="untimed rounds first (default 20)")
    p.add_argument("--top-k", type=int, default=5, help="passages per query (default 5)")
    p.add_argument("--out", default=str(OUT), help=f"where overhead.json and overhead.md go (default {OUT})")


def _pct(xs: list[float], q: float) -> float:
    return statistics.quantiles(xs, n=100, method="inclusive")[int(q) - 1] if len(xs) > 1 else xs[0]


def measure(url: str, memory, questions: list[str], rounds: int, warmup: int, top_k: int) -> dict:
    """Time ``rounds`` pairs (in-process, HTTP); milliseconds."""
    import httpx
    local, remote, diff = [], [], []
    with httpx.Client(base_url=url, headers={"X-API-Key": KEY}, timeout=60) as client:
        for i in range(warmup + rounds):
            q = questions[i % len(questions)]

            def in_process(q: str = q) -> tuple[float, list[str]]:
                t = time.perf_counter()
                out = memory.retrieve([q], top_k=top_k)
                return time.perf_counter() - t, [p["id"] for p in out[0]["passages"]]

            def over_http(q: str = q) -> tuple[float, list[str]]:
                t = time.perf_counter()
                r = client.post("/retrieve", json={"query": q, "top_k": top_k})
                body = r.json()
                elapsed = time.perf_counter() - t
                if r.status_code != 200:
                    raise RuntimeError(f"POST /retrieve answered {r.status_code}: {r.text[:300]}")
                return elapsed, [p["id"] for p in body["results"][0]["passages"]]

            first, second = (in_process, over_http) if i % 2 == 0 else (over_http, in_process)
            a, b = first(), second()
            (tl, ids_l), (th, ids_h) = (a, b) if first is in_process else (b, a)
            if ids_l != ids_h:
                raise RuntimeError(f"{q!r}: HTTP ranked {ids_h}, in-process {ids_l}")
            if i >= warmup:
                local.append(tl * 1000)
                remote.append(th * 1000)
                diff.append((th - tl) * 1000)
    replay = service_alone(client_url=url, memory=memory, questions=questions, rounds=rounds, top_k=top_k)
    return {"rounds": rounds, "top_k": top_k, "service_alone_ms": replay,
            "in_process_ms": {"p50": statistics.median(local), "p90": _pct(local, 90)},
            "http_ms": {"p50": statistics.median(remote), "p90": _pct(remote, 90)},
            "overhead_ms": {"p50": statistics.median(diff), "p90": _pct(diff, 90),
                            "p50_difference": statistics.median(remote) - statistics.median(local)}}


def service_alone(client_url: str, memory, questions: list[str], rounds: int, top_k: int) -> dict:
    """The service's own cost with the ranking taken out: ``memory.retrieve`` answers each question with
    the result it computed before (recorded here, the same payload), and ``POST /retrieve`` is timed."""
    import httpx
    recorded = {q: memory.retrieve([q], top_k=top_k) for q in questions}
    real = memory.retrieve
    memory.retrieve = lambda queries, **kw: recorded[queries[0]]
    times = []
    try:
        with httpx.Client(base_url=client_url, headers={"X-API-Key": KEY}, timeout=60) as client:
            for i in range(rounds + 20):
                t = time.perf_counter()
                r = client.post("/retrieve", json={"query": questions[i % len(questions)], "top_k": top_k})
                r.json()
                if i >= 20:
                    times.append((time.perf_counter() - t) * 1000)
    finally:
        memory.retrieve = real
    return {"p50": statistics.median(times), "p90": _pct(times, 90)}


def markdown(r: dict, meta: dict) -> str:
    return "\n".join([
        "# hippo-engine serve: HTTP overhead of one retrieve", "",
        f"{meta['when']}; {meta['machine']}; load before: {meta['load_before']}, after: {meta['load_after']}; "
        f"{r['rounds']} rounds after {meta['warmup']} warm-up, top_k {r['top_k']}, the sample corpus "
        "(extractor ner, packaged embedder), the same warm Memory in-process and behind uvicorn on 127.0.0.1 "
        "(access key on)", "",
        "| | p50 ms | p90 ms |", "|---|---:|---:|",
        f"| in-process `Memory.retrieve` | {r['in_process_ms']['p50']:.2f} | {r['in_process_ms']['p90']:.2f} |",
        f"| through HTTP `POST /retrieve` | {r['http_ms']['p50']:.2f} | {r['http_ms']['p90']:.2f} |",
        f"| per-round difference (HTTP - in-process) | {r['overhead_ms']['p50']:.2f} | {r['overhead_ms']['p90']:.2f} |",
        f"| `POST /retrieve` with the ranking replayed (the service alone) | {r['service_alone_ms']['p50']:.2f} | "
        f"{r['service_alone_ms']['p90']:.2f} |",
        "", f"The service adds {r['overhead_ms']['p50']:.1f} ms at the median (per-round difference; "
            f"difference of the medians {r['overhead_ms']['p50_difference']:.1f} ms); on its own, with the "
            f"same response and no ranking, a request takes {r['service_alone_ms']['p50']:.1f} ms.", ""])


def run(args: argparse.Namespace, argv: Sequence[str]) -> int:
    """Index the sample, serve it, time the pairs, write the report."""
    import platform

    from .serve_common import sample_corpus, sample_service
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    questions = [q["question"] for q in sample_corpus()[1]]
    with tempfile.TemporaryDirectory(prefix="serve-overhead-") as tmp:
        with sample_service(Path(tmp) / "index", access_key=KEY) as (url, memory):
            load_before = " ".join(f"{x:.2f}" for x in os.getloadavg())
            result = measure(url, memory, questions, args.rounds, args.warmup, args.top_k)
            load_after = " ".join(f"{x:.2f}" for x in os.getloadavg())
    meta = {"when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "warmup": args.warmup,
            "machine": f"{platform.machine()}, {os.cpu_count()} CPUs", "load_before": load_before,
            "load_after": load_after}
    (out / "overhead.json").write_text(json.dumps({"meta": meta, **result}, indent=1))
    (out / "overhead.md").write_text(markdown(result, meta))
    print(markdown(result, meta))
    return 0
