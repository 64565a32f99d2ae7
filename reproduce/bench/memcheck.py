"""Memory over thousands of ``retrieve`` calls on a real index: does the process grow?

    python -m reproduce memory-check [--passages 600] [--calls 5000] [--warmup 200] [--tracemalloc]

Builds (or reuses) an index of the first ``--passages`` MuSiQue passages with their released
OpenIE results and the engine's encoder, then calls ``retrieve`` (recognition filter off, one
MuSiQue question per call, cycling) ``--calls`` times in one process. RSS is read from
``/proc/self/status`` at the start (index open, model loaded), after ``--warmup`` calls and at
every checkpoint; the report gives the growth after warm-up per 1,000 calls (a least-squares
slope over the checkpoints). ``--tracemalloc`` also traces Python allocations and lists the
source lines whose allocations grew most between warm-up and the end (slower).
"""
from __future__ import annotations

import argparse
import gc
import time
from collections.abc import Sequence
from pathlib import Path

from ..common import peak_rss_mb, rss_mb
from ..harness import option, report_options
from .reliability import (
    header,
    load_line,
    make_encoder,
    musique_passages,
    musique_questions,
    open_engine,
    write_openie_subset,
    write_reports,
)


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The ``memory-check`` command's options."""
    ap.add_argument("--passages", type=int, default=600, help="MuSiQue passages in the index (default 600)")
    ap.add_argument("--calls", type=int, default=5000, help="retrieve calls (default 5000)")
    ap.add_argument("--warmup", type=int, default=200, help="calls before the growth is measured (default 200)")
    ap.add_argument("--checkpoints", type=int, default=20, help="RSS readings after warm-up (default 20)")
    ap.add_argument("--top-k", type=int, default=5, help="passages per query (default 5)")
    option(ap, "--encoder")
    option(ap, "--work", default=Path("outputs/memory_check"), help="index folder (kept, reused)")
    ap.add_argument("--tracemalloc", action="store_true", help="trace Python allocations too (slower)")
    report_options(ap, "memory_check")


def build_or_open(args: argparse.Namespace):
    """The index of ``--passages`` passages in ``--work`` (built once, then reused)."""
    save = Path(args.work) / f"index_{args.passages}_{args.encoder}"
    rag = open_engine(save, make_encoder(args.encoder))
    if len(rag.index_state) != args.passages:
        docs = musique_passages(args.passages)
        rag.import_openie(write_openie_subset(docs, Path(args.work) / f"openie_{args.passages}.json"))
        t = time.perf_counter()
        rag.index(docs)
        print(f"built the index of {args.passages} passages in {time.perf_counter() - t:.0f} s ({load_line()})",
              flush=True)
    return rag


def slope_per_1000(points: list[tuple[int, float]]) -> float:
    """Least-squares slope of (calls, MiB) in MiB per 1,000 calls (0 with fewer than 2 points)."""
    if len(points) < 2:
        return 0.0
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    den = sum((x - mx) ** 2 for x, _ in points)
    return 1000 * sum((x - mx) * (y - my) for x, y in points) / den if den else 0.0


def measure(args: argparse.Namespace, progress=print) -> dict:
    """Open the index, run the calls, read RSS along the way."""
    import tracemalloc
    rag = build_or_open(args)
    questions = musique_questions()
    rag.retrieve([questions[0]], num_to_retrieve=args.top_k)       # model loaded, retriever built
    gc.collect()
    start = rss_mb()
    if args.tracemalloc:
        tracemalloc.start(10)
    t0 = time.perf_counter()
    every = max(1, (args.calls - args.warmup) // max(1, args.checkpoints))
    points: list[tuple[int, float]] = []
    warm = snap_warm = None
    errors = 0
    for i in range(1, args.calls + 1):
        try:
            sols = rag.retrieve([questions[i % len(questions)]], num_to_retrieve=args.top_k)
            errors += bool(sols[0].errors) or len(sols[0].docs) != args.top_k
        except Exception as e:  # noqa: BLE001 - counted; the check is about memory
            errors += 1
            progress(f"call {i}: {type(e).__name__}: {e}")
        if i == args.warmup:
            gc.collect()
            warm = rss_mb()
            points.append((i, warm))
            snap_warm = tracemalloc.take_snapshot() if args.tracemalloc else None
        elif i > args.warmup and (i - args.warmup) % every == 0:
            points.append((i, rss_mb()))
            progress(f"{i}/{args.calls} calls, RSS {points[-1][1]:.1f} MiB ({time.perf_counter() - t0:.0f} s, "
                     f"{load_line()})")
    gc.collect()
    end = rss_mb()
    elapsed = time.perf_counter() - t0
    top = []
    if args.tracemalloc and snap_warm is not None:
        diff = tracemalloc.take_snapshot().compare_to(snap_warm, "lineno")
        top = [f"{d.traceback[0].filename.rsplit('/', 3)[-1]}:{d.traceback[0].lineno} {d.size_diff / 1024:+.1f} KiB "
               f"({d.count_diff:+d} blocks)" for d in diff[:10]]
        tracemalloc.stop()
    rag.close()
    return {"passages": args.passages, "calls": args.calls, "warmup": args.warmup, "encoder": args.encoder,
            "rss_start_mb": round(start, 1), "rss_after_warmup_mb": round(warm or start, 1),
            "rss_end_mb": round(end, 1),
            "peak_rss_mb": round(peak_rss_mb(), 1), "growth_after_warmup_mb": round(end - (warm or start), 1),
            "slope_mb_per_1000_calls": round(slope_per_1000(points), 3), "points": points,
            "ms_per_call": round(1000 * elapsed / args.calls, 2), "calls_with_errors": errors,
            "tracemalloc_top": top, "load": load_line()}


def render(res: dict, command: str) -> str:
    """The markdown report."""
    lines = [header("Memory over repeated retrieve calls", command),
             f"index of {res['passages']} MuSiQue passages (released OpenIE), encoder {res['encoder']}, filter off; "
             f"{res['calls']:,} calls, one question each, {res['ms_per_call']} ms per call\n",
             "| RSS at start | after warm-up | at the end | peak | growth after warm-up | slope per 1,000 calls |"
             " calls with errors |", "|---|---|---|---|---|---|---|",
             f"| {res['rss_start_mb']} MiB | {res['rss_after_warmup_mb']} MiB ({res['warmup']} calls) | "
             f"{res['rss_end_mb']} MiB | {res['peak_rss_mb']} MiB | {res['growth_after_warmup_mb']:+} MiB | "
             f"{res['slope_mb_per_1000_calls']:+} MiB | {res['calls_with_errors']} |"]
    if res["tracemalloc_top"]:
        lines += ["", "Python allocations that grew most after warm-up (tracemalloc):", ""]
        lines += [f"* {t}" for t in res["tracemalloc_top"]]
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace, argv: Sequence[str]) -> int:
    """Measure, print and write the report."""
    res = measure(args, progress=lambda s: print(s, flush=True))
    text = render(res, f"python -m reproduce {' '.join(argv)}")
    kw = {"out_dir": args.out_dir} if args.out_dir else {}
    md, js = write_reports(args.name, text, res, **kw)
    print(text)
    print(f"written: {md}, {js}")
    return 0 if res["calls_with_errors"] == 0 else 1


if __name__ == "__main__":
    raise SystemExit("run: python -m reproduce memory-check")
