"""Speed benchmark on synthetic corpora: per-stage timings of hippo-engine against the reference approach.

    python -m reproduce bench [--sizes 1000 10000 100000] [--musique] [--queries 64]
                              [--out reproduce/results/bench.md]

Seeded synthetic HippoRAG-shaped corpora (P passages, about 5P entities, 10 triples per passage,
some near-duplicate entity names that become synonymy edges) are built at each size, plus, with
``--musique``, a corpus shaped like the MuSiQue graph of the paper (11,656 passages, ~85k
entities, ~140k fact edges, ~1.1M synonymy entries from clusters of similar entity names).
Embeddings are stand-ins computed from a hash of each text (entity clusters get nearby vectors),
so encoding is not what is timed. Each size runs in its own process, so its peak memory is its own.

Timed per size: index build (per stage: synonymy kNN, graph, stores), graph build from scratch,
retriever build (PPR matrix), fact+passage scoring, seeding, PPR, end-to-end retrieval per
query (single and batched; no query encoding, no LLM filter), insert of +1% and +10% passages
into the built index, peak RSS. The reference approach is timed in the same process: igraph
PRPACK per query (what HippoRAG calls) inside a per-query retrieval loop written like the
reference's, and all-vs-all synonymy kNN (what the reference redoes on every insert). Read the
ratios: absolute times move with the machine's load.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from ..common import write_result
from .measure import run_one
from .report import render


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The ``bench`` command's options."""
    ap.add_argument("--sizes", type=int, nargs="*", default=[1000, 10000], help="passage counts (default 1000 10000)")
    ap.add_argument("--musique", action="store_true", help="also the MuSiQue-shaped corpus")
    ap.add_argument("--queries", type=int, default=64, help="queries per corpus (default 64)")
    ap.add_argument("--ref-queries", type=int, default=16, help="queries timed one by one (ours and reference)")
    ap.add_argument("--out", default="reproduce/results/bench.md", help="report file (default %(default)s)")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    ap.add_argument("--json", help=argparse.SUPPRESS)


def run(args: argparse.Namespace, argv: Sequence[str]) -> int:
    """Each corpus in a fresh process (``--one``, so its peak RSS is its own), then the report."""
    if args.one:
        row = run_one(args.one, args.queries, args.ref_queries)
        Path(args.json).write_text(json.dumps(row))
        return 0
    t0 = time.perf_counter()
    specs = [str(p) for p in args.sizes] + (["musique"] if args.musique else [])
    rows = []
    for spec in specs:
        with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
            out_json = f.name
        cmd = [sys.executable, "-m", "reproduce", "bench", "--one", spec, "--json", out_json,
               "--queries", str(args.queries), "--ref-queries", str(args.ref_queries)]
        subprocess.run(cmd, check=True)
        rows.append(json.loads(Path(out_json).read_text()))
        os.unlink(out_json)
        print(json.dumps({k: v for k, v in rows[-1].items() if not isinstance(v, dict)}), flush=True)
    text = render(rows, f"PYTHONPATH=. python -m reproduce {' '.join(argv)}", time.perf_counter() - t0)
    write_result(Path(args.out), text)
    print(text)
    return 0
