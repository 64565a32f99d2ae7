"""Retrieval time per question of one batch of every question, encoding excluded: the one-walk ``ner``
search (``second_hop="none"``, ``dense_agree=0``, ``dense_weight=0``) and the engine's default on a ``ner`` index (the
``"auto"`` settings, given explicitly so that an older engine runs the same configuration: a second walk
and one score of three terms; with ``--update`` also that default with its second walk updated from the first
instead of solved afresh, ``second_walk_solver="update"``), alternately ``--rounds`` times each, wall and
CPU (process) seconds, with a hash of the rankings (every question's top-200 passage rows and ``float.hex``
scores: equal hashes, same rankings and scores).

    python -m reproduce.recall_timing {musique,2wiki} [--work DIR] [--data DIR] [--rounds N] [--update]

Reads the titled index that ``python -m reproduce table-recall-llm-free`` built under ``--work``; the
queries are encoded first (not timed); each configuration gets a warm-up batch of 64 questions. To time
another checkout's engine with this script, run it from a folder outside both checkouts with
``PYTHONPATH=<folder holding only that hippo_engine>:<this checkout>`` (the engine line says which
was imported).
"""
from __future__ import annotations

import argparse
import hashlib
import subprocess
import sys
import time
from pathlib import Path

from .common import REPO_ROOT
from .recall_bench import TOP, Bench
from .table_recall import ONE_WALK, RECOMMENDED


def rankings_hash(results) -> str:
    """First 16 hex digits of the SHA-256 of every result's passage rows and ``float.hex`` scores."""
    h = hashlib.sha256()
    for res in results:
        h.update((",".join(str(int(x)) for x in res.order) + ";"
                  + ",".join(float(x).hex() for x in res.scores) + "\n").encode("ascii"))
    return h.hexdigest()[:16]


def _time_walks(r) -> dict:
    """Wrap ``r.run_ppr`` (the PPR kernel: both walks go through it) to add up its process CPU seconds
    (its threads included) and the walks (reset columns) it ran."""
    acc = {"cpu": 0.0, "columns": 0}
    run = r.run_ppr

    def timed(resets, priors=None):
        c = time.process_time()
        out = run(resets, priors)
        acc["cpu"] += time.process_time() - c
        acc["columns"] += resets.shape[1]
        return out
    r.run_ppr = timed
    return acc


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m reproduce.recall_timing", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dataset", choices=("musique", "2wiki"))
    ap.add_argument("--work", type=Path, default=REPO_ROOT / "outputs" / "reproduce" / "recall-llm-free")
    ap.add_argument("--data", type=Path, default=REPO_ROOT.parent / "shared" / "data")
    ap.add_argument("--rounds", type=int, default=2, help="timed runs of each configuration (default 2)")
    ap.add_argument("--update", action="store_true",
                    help="also time the default with its second walk updated from the first "
                         "(second_walk_solver='update')")
    args = ap.parse_args(argv)
    import hippo_engine
    from hippo_engine.models.encoder import TransformersEncoder
    from hippo_engine.retrieve.retriever import Retriever

    from .common import engine_commit
    from .recall_data import CachingEncoder, load, open_index
    print(f"engine {Path(hippo_engine.__file__).resolve().parent} at {engine_commit()}", flush=True)
    enc = CachingEncoder(TransformersEncoder(), args.work / "vectors.sqlite")
    ds = load(args.dataset, True, args.data)
    rag = open_index(args.work, args.dataset, True, ds.docs, enc, **ONE_WALK)
    b = Bench(rag, ds)
    qs = list(ds.questions)
    configs = [("one walk", ONE_WALK), ("default", RECOMMENDED)]
    if args.update:
        configs.append(("updated", {**RECOMMENDED, "second_walk_solver": "update"}))
    for label, cfg in configs * args.rounds:
        r = Retriever.from_index(rag.config.replace(**cfg), rag.index_state)
        r.search(qs[:64], b.q_fact[:64], b.q_pass[:64], TOP, None, b.ner_vectors[:64])
        walks = _time_walks(r)
        load_now = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
        w, c = time.perf_counter(), time.process_time()
        results, tim = r.search(qs, b.q_fact, b.q_pass, TOP, None, b.ner_vectors)
        w, c = time.perf_counter() - w, time.process_time() - c
        n = len(qs)
        print(f"{args.dataset} {label:9s} wall {1000 * w / n:.1f} ms/q, CPU {1000 * c / n:.1f} ms/q (PPR kernel "
              f"{1000 * walks['cpu'] / n:.1f} ms CPU/q over {walks['columns']} walks; wall: PPR and ranking "
              f"{1000 * tim['ppr'] / n:.1f}, seeding {1000 * tim['seeding'] / n:.1f}, scoring "
              f"{1000 * tim['scoring'] / n:.1f}) hash {rankings_hash(results)} | {load_now}", flush=True)
    rag.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
