"""Indexing checks on the MuSiQue training subset with its released GPT-3.5 OpenIE file.

    python -m reproduce check-index [--data DIR] [--work DIR]

1. Index all 1,890 passages from the OpenIE file with the default embedder; an LLM that raises
   on any call proves no LLM call is made. Prints graph counts, time per stage, peak memory.
2. Idempotence: indexing the same passages again changes nothing.
3. Incrementality: index(A); index(B) equals index(A+B).
4. Delete: index(A+B); delete(B) equals index(A).
"""
from __future__ import annotations

import argparse
import json
import shutil
import time
from collections.abc import Sequence
from pathlib import Path

from hippo_engine import HippoRAG
from hippo_engine.index.diagnostics import diff_snapshots, snapshot_index

from .common import ForbiddenLLM, load_average, peak_rss_mb
from .harness import option


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The ``check-index`` command's options."""
    option(ap, "--data")
    option(ap, "--work", default=Path("outputs/check_index"), help="index folders (emptied first)")
    option(ap, "--embedder")
    ap.add_argument("--skip-equality", action="store_true", help="only step 1")


def run(args: argparse.Namespace, argv: Sequence[str]) -> int:
    """Index from the OpenIE file without any LLM call, then the idempotence, insert and delete checks."""
    corpus = json.loads((args.data / "musique_train_corpus.json").read_text())
    docs = [f"{d['title']}\n{d['text']}" for d in corpus]
    openie = next(args.data.glob("openie_*.json"))
    shutil.rmtree(args.work, ignore_errors=True)

    def fresh(name):
        rag = HippoRAG(args.work / name, llm=ForbiddenLLM(), embedding_model_name=args.embedder, show_progress=False,
                       extractor="openie")
        rag.import_openie(openie)
        return rag

    t = time.perf_counter()
    full = fresh("full")
    _ = full.encoder  # load the model outside the timed index
    load_s = time.perf_counter() - t
    load_before, cpu0 = load_average(), time.process_time()
    rep = full.index(docs)
    cpu_s = time.process_time() - cpu0
    print(f"[1] indexed {rep['added']} passages; LLM calls: {ForbiddenLLM.calls}; embedder load {load_s:.1f}s")
    print("    graph:", json.dumps(full.graph_stats()))
    print("    stages (s):", json.dumps({k: round(v, 2) for k, v in rep["timings"].items()}))
    print(f"    CPU {cpu_s:.1f}s (all threads); load average before {load_before}, after {load_average()}")
    print(f"    peak RSS so far: {peak_rss_mb():.0f} MB")
    if args.skip_equality:
        return 0
    snap_full = snapshot_index(full)
    full.index(docs)
    d = diff_snapshots(snap_full, snapshot_index(full))
    print(f"[2] idempotence: {'identical' if not d else d}")

    half = len(docs) // 2
    A, B = docs[:half], docs[half:]
    inc = fresh("inc")
    inc.index(A)
    t = time.perf_counter()
    inc.index(B)
    d = diff_snapshots(snap_full, snapshot_index(inc))
    print(f"[3] index(A); index(B) vs index(A+B) (|A|={len(A)}, |B|={len(B)}, "
          f"insert of B {time.perf_counter() - t:.1f}s): {'identical' if not d else d}")
    only_a = fresh("only_a")
    only_a.index(A)
    t = time.perf_counter()
    full.delete(B)
    del_s = time.perf_counter() - t
    d = diff_snapshots(snapshot_index(only_a), snapshot_index(full))
    print(f"[4] index(A+B); delete(B) vs index(A) (delete {del_s:.1f}s): {'identical' if not d else d}")
    print(f"    LLM calls in all: {ForbiddenLLM.calls}; peak RSS {peak_rss_mb():.0f} MB")
    return 0


if __name__ == "__main__":
    raise SystemExit("run: python -m reproduce check-index")
