"""Retrieval time per question of one batch of every question, encoding excluded: today's ``ner`` search
and the recommended LLM-free configuration, each twice, wall and CPU (process) seconds.

    python -m reproduce.recall_timing {musique,2wiki} [--work DIR] [--data DIR]

Reads the titled index that ``python -m reproduce table-recall-llm-free`` built under ``--work``; the
queries are encoded first (not timed); each configuration gets a warm-up batch of 64 questions.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

from .common import REPO_ROOT
from .recall_bench import TOP, Bench
from .table_recall import RECOMMENDED


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m reproduce.recall_timing", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dataset", choices=("musique", "2wiki"))
    ap.add_argument("--work", type=Path, default=REPO_ROOT / "outputs" / "reproduce" / "recall-llm-free")
    ap.add_argument("--data", type=Path, default=REPO_ROOT.parent / "shared" / "data")
    args = ap.parse_args(argv)
    from hippo_engine.models.encoder import TransformersEncoder
    from hippo_engine.retrieve.retriever import Retriever

    from .recall_data import CachingEncoder, load, open_index
    enc = CachingEncoder(TransformersEncoder(), args.work / "vectors.sqlite")
    ds = load(args.dataset, True, args.data)
    rag = open_index(args.work, args.dataset, True, ds.docs, enc)
    b = Bench(rag, ds)
    qs = list(ds.questions)
    for label, cfg in [("ner", {}), ("recommended", RECOMMENDED)] * 2:
        r = Retriever.from_index(rag.config.replace(**cfg), rag.index_state)
        r.search(qs[:64], b.q_fact[:64], b.q_pass[:64], TOP, None, b.ner_vectors[:64])
        load_now = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
        w, c = time.perf_counter(), time.process_time()
        _, tim = r.search(qs, b.q_fact, b.q_pass, TOP, None, b.ner_vectors)
        w, c = time.perf_counter() - w, time.process_time() - c
        n = len(qs)
        print(f"{args.dataset} {label:12s} wall {1000 * w / n:.1f} ms/q, CPU {1000 * c / n:.1f} ms/q (PPR "
              f"{1000 * tim['ppr'] / n:.1f}, seeding {1000 * tim['seeding'] / n:.1f}, scoring "
              f"{1000 * tim['scoring'] / n:.1f}) | {load_now}", flush=True)
    rag.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
