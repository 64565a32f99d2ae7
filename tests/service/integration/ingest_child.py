"""A server-like process for the kill tests: a Memory over ``save_dir`` (fake models) that accepts the
documents of ``corpus`` (a JSON list of {id, text, title?, metadata?}) the queue does not know yet, in
chunks of ``chunk`` (one job each, printing ``accepted <first id>`` after each), lets its worker index them
and exits 0 once the queue is empty.

``--kill-after-index``: SIGKILL itself right after its first ``rag.index`` call returns, before the
batch's statuses are recorded (the crash the exactly-once rule is about). ``--print-batches``: print
``batch <ids>`` after each ``rag.index`` call. ``--storage postgres --dsn DSN``: the index on that server.
``--pause S``: sleep S seconds after each ``rag.index`` call (fake models index in milliseconds; real
batches take seconds). ``--real``: the real embedder and ``extractor="ner"`` instead of fake models."""
from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))      # tests/: fakes, helpers


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("save_dir")
    ap.add_argument("corpus")
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--chunk", type=int, default=10)
    ap.add_argument("--storage", default=None)
    ap.add_argument("--dsn", default=None)
    ap.add_argument("--schema", default=None)
    ap.add_argument("--kill-after-index", action="store_true")
    ap.add_argument("--no-add", action="store_true")
    ap.add_argument("--real", action="store_true", help="the real embedder and extractor='ner' (no fakes)")
    ap.add_argument("--print-batches", action="store_true", help="print 'batch <ids>' after each index call")
    ap.add_argument("--pause", type=float, default=0.0,
                    help="sleep this long after each index call (batches as slow as real ones, so kills land mid-run)")
    args = ap.parse_args()
    from helpers import make_rag

    from hippo_engine.service.memory import Memory
    opts = {"use_filter": False}
    if args.storage:
        opts.update(storage=args.storage, dsn=args.dsn, postgres_schema=args.schema)
    if args.real:
        from hippo_engine import HippoRAG
        rag = HippoRAG(args.save_dir, extractor="ner", show_progress=False)
    else:
        rag = make_rag(args.save_dir, **opts)
    mem = Memory(rag, batch_size=args.batch_size, poll_s=0.05, worker=False)
    if args.kill_after_index:
        mem.ingestor.after_index = lambda ids: os.kill(os.getpid(), signal.SIGKILL)
    elif args.print_batches:
        mem.ingestor.after_index = lambda ids: print("batch", ",".join(ids), flush=True)
    elif args.pause > 0:
        mem.ingestor.after_index = lambda ids: time.sleep(args.pause)
    mem.ingestor.start()
    if not args.no_add:
        docs = json.loads(Path(args.corpus).read_text(encoding="utf-8"))
        for i in range(0, len(docs), args.chunk):
            chunk = docs[i:i + args.chunk]
            if all(mem.document(d["id"]) is not None for d in chunk):
                continue
            mem.add(chunk)
            print("accepted", chunk[0]["id"], flush=True)
    ok = mem.wait(timeout=300)
    mem.close()
    return 0 if ok else 3


if __name__ == "__main__":
    sys.exit(main())
