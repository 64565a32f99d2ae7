"""Indexing cost per document from 10k to 100k tiny documents, each size in one ``index()`` call
(issue 20, item 7: indexing was quadratic in the documents of a call).

    python -m reproduce index-scale [--sizes 10000 25000 50000 100000] [--repeat 3] [--work DIR]
        [--out-dir DIR] [--name README]

Each size gets a fresh SQLite index (``<work>/<size>``) and one ``HippoRAG.index(docs)`` call on
``size`` distinct tiny documents (``"doc 17: topic17 meets topic122"``). Facts come from a
trivial extractor: one triple per document, ``(topicA, "meets", topicB)`` from its own words,
over a vocabulary of 500 topics (no LLM; the entity and fact sets stay bounded, so what grows is
the per-document work: passages, their graph nodes and context edges, document rows). Vectors
come from a fast fake encoder (16 dimensions from the md5 of the text), so embedding cost is
left out. Before the sizes, a 200-document warm-up pays the one-time imports.

Reported per size: the call's wall time, the report's ``timings`` (every stage of ``index()``;
they add up to its ``total``) of the best of ``--repeat`` runs (least total; the machine is
shared), seconds per 1,000 documents for each stage and in all, what the wall time has beyond
``total`` (the facade around it), CPU seconds, RSS, and the load average (``uptime``) before and
after. The result (markdown and JSON) goes to ``reproduce/results/index_scale/``.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import platform
import shutil
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from hippo_engine.datatypes import Extraction
from hippo_engine.models.encoder import Encoder

from . import common
from .common import RESULTS_DIR, commit_label, load_average, peak_rss_mb, rss_mb, write_result

DEFAULT_SIZES = (10_000, 25_000, 50_000, 100_000)
TOPICS = 500
OUT_DIR = RESULTS_DIR / "index_scale"


class HashEncoder(Encoder):
    """A fast fake encoder: each text's vector is 16 bytes of its md5, centred and normalised."""

    name = "fake-md5-16"
    dim = 16

    def encode(self, texts: Sequence[str], *, instruction: str | None = None, show_progress: bool = False,
               desc: str = "") -> np.ndarray:
        """(len(texts), 16) float32 unit vectors."""
        raw = b"".join(hashlib.md5(((instruction or "") + t).encode()).digest() for t in texts)
        out = np.frombuffer(raw, np.uint8).reshape(len(texts), self.dim).astype(np.float32) - 127.5
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-6)


class TopicExtractor:
    """A trivial extractor: one triple per passage, ``(topicA, "meets", topicB)`` from its words."""

    name = "openie"

    def extract(self, passages: Mapping[str, str]) -> Extraction:
        """The passages' triples (never fails, never calls an LLM)."""
        return Extraction(triples={p: [triple_of(t)] for p, t in passages.items()})


def triple_of(text: str) -> tuple[str, str, str]:
    """``"doc i: topicA meets topicB"`` -> ``(topicA, "meets", topicB)``."""
    words = text.split()
    return words[2], words[3], words[4]


def tiny_docs(n: int, start: int = 0) -> list[str]:
    """``n`` distinct tiny documents, each naming two of the ``TOPICS`` topics."""
    return [f"doc {i}: topic{i % TOPICS} meets topic{(7 * i + 3) % TOPICS}" for i in range(start, start + n)]


def uptime() -> str:
    """The ``uptime`` line (the machine's load), or the load average where it is missing."""
    return common.uptime(f"load average: {load_average(', ')}")


def index_once(folder: Path, docs: list[str]) -> dict:
    """One ``index()`` call on a fresh index in ``folder``: its wall time and report."""
    from hippo_engine import HippoRAG
    shutil.rmtree(folder, ignore_errors=True)
    rag = HippoRAG(folder, encoder=HashEncoder(), show_progress=False, use_filter=False, extractor="openie")
    rag.extractor = TopicExtractor()
    t0, c0 = time.perf_counter(), time.process_time()
    report = rag.index(docs)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    rag.close()
    shutil.rmtree(folder, ignore_errors=True)
    return {"wall_s": wall, "cpu_s": cpu, "report": report}


def measure(size: int, work: Path, repeat: int = 1) -> dict:
    """The figures of one size: of ``repeat`` runs, the one with the least ``total`` (the others'
    totals are kept in ``all_totals_s``)."""
    before = uptime()
    runs = [index_once(work / str(size), tiny_docs(size)) for _ in range(max(1, repeat))]
    out = min(runs, key=lambda r: r["report"]["timings"]["total"])
    t = out["report"]["timings"]
    per_1k = {k: 1000 * v / size for k, v in t.items()}
    return {"size": size, "added": out["report"]["added"], "wall_s": out["wall_s"], "timings": t,
            "per_1k_s": per_1k, "wall_per_1k_s": 1000 * out["wall_s"] / size, "cpu_s": out["cpu_s"],
            "cpu_per_1k_s": 1000 * out["cpu_s"] / size,
            "outside_total_s": out["wall_s"] - t["total"],
            "stages_sum_minus_total_s": sum(v for k, v in t.items() if k != "total") - t["total"],
            "all_totals_s": [r["report"]["timings"]["total"] for r in runs],
            "rss_mb": rss_mb(), "uptime_before": before, "uptime_after": uptime()}


def markdown(rows: list[dict], command: str, head: str, started: str) -> str:
    """The result page."""
    stages = list(dict.fromkeys(k for r in rows for k in r["timings"] if k != "total"))
    sizes = [f"{r['size']:,}" for r in rows]
    L = ["# index() cost per document, 10k to 100k tiny documents in one call", "",
         f"Command: `{command}`  ",
         f"Commit: {head}; started {started}; {platform.processor() or platform.machine()}, "
         f"Python {platform.python_version()}.  ",
         "Setup: one `HippoRAG.index(docs)` call per size on a fresh SQLite index; a trivial extractor (one "
         f"triple per document from its words, {TOPICS} topics: no LLM), a fast fake encoder (md5, 16 dims: "
         "embedding cost left out); a 200-document warm-up first; per size the best of `--repeat` runs (least "
         "total). Stage names are the report's `timings`; they tile the call, so they add up to `total`.", "",
         "## Seconds per 1,000 documents, by stage", "",
         "| stage | " + " | ".join(sizes) + " |", "|---|" + "---|" * len(rows)]
    for s in stages:
        L.append(f"| {s} | " + " | ".join(f"{r['per_1k_s'].get(s, 0.0):.4f}" for r in rows) + " |")
    L.append("| **total (index_documents)** | " + " | ".join(f"**{r['per_1k_s']['total']:.4f}**" for r in rows) + " |")
    L.append("| wall of the index() call | " + " | ".join(f"{r['wall_per_1k_s']:.4f}" for r in rows) + " |")
    L.append("| CPU of the index() call (this process) | " + " | ".join(f"{r['cpu_per_1k_s']:.4f}" for r in rows)
             + " |")
    first, last = rows[0], rows[-1]
    L += ["", f"Ratio of seconds per 1,000 documents, {last['size']:,} vs {first['size']:,} documents: "
          f"{last['per_1k_s']['total'] / first['per_1k_s']['total']:.2f} (1.00 = flat; quadratic would be "
          f"{last['size'] / first['size']:.0f}); in CPU seconds {last['cpu_per_1k_s'] / first['cpu_per_1k_s']:.2f}. "
          "With more runnable processes than cores (the load average below) wall seconds include waiting.", "",
          "## Per size", "",
          "| documents | added | wall s | timings total s (all runs) | wall beyond total s | stages sum - total s | "
          "RSS MiB | uptime before | uptime after |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        runs = ", ".join(f"{x:.2f}" for x in r["all_totals_s"])
        L.append(f"| {r['size']:,} | {r['added']:,} | {r['wall_s']:.2f} | {r['timings']['total']:.2f} ({runs}) | "
                 f"{r['outside_total_s']:.3f} | {r['stages_sum_minus_total_s']:.1e} | {r['rss_mb']:.0f} | "
                 f"{r['uptime_before']} | {r['uptime_after']} |")
    L.append("")
    return "\n".join(L)


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The ``index-scale`` command's options."""
    ap.add_argument("--sizes", type=int, nargs="+", default=list(DEFAULT_SIZES),
                    help="documents per index() call, one fresh index each (default 10000 25000 50000 100000)")
    ap.add_argument("--repeat", type=int, default=3,
                    help="runs per size; the one with the least total is reported, all totals kept (default 3)")
    ap.add_argument("--work", type=Path, default=None, help="work folder (default: a temporary one)")
    ap.add_argument("--out-dir", type=Path, default=OUT_DIR,
                    help="result folder (default reproduce/results/index_scale)")
    ap.add_argument("--name", default="README", help="result file name, without .md / .json (default README)")


def run(args: argparse.Namespace, argv: Sequence[str]) -> int:
    """Measure every size and write the result."""
    started = time.strftime("%Y-%m-%d %H:%M:%S")
    head_s = commit_label(" (with uncommitted changes)", "unknown")
    with tempfile.TemporaryDirectory(prefix="index_scale_") as tmp:
        work = Path(args.work) if args.work else Path(tmp)
        index_once(work / "warmup", tiny_docs(200, start=10**7))
        rows = []
        for size in args.sizes:
            rows.append(measure(size, work, args.repeat))
            r = rows[-1]
            print(f"{size:>7,} docs: wall {r['wall_s']:.2f} s, {r['per_1k_s']['total']:.4f} s per 1k docs; "
                  f"{r['uptime_after']}", flush=True)
    rest = list(argv[1:] if argv and argv[0] == "index-scale" else argv)
    command = " ".join(["python -m reproduce index-scale", *rest])
    md = write_result(Path(args.out_dir) / f"{args.name}.md", markdown(rows, command, head_s, started))
    write_result(Path(args.out_dir) / f"{args.name}.json",
                 json.dumps({"command": command, "commit": head_s, "started": started, "rows": rows,
                             "peak_rss_mb": peak_rss_mb()}, indent=1))
    print(f"wrote {md}")
    return 0


if __name__ == "__main__":
    import sys

    from .common import module_main
    sys.exit(module_main(sys.modules[__name__]))
