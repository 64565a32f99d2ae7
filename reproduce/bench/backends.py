"""SQLite against PostgreSQL + pgvector and FalkorDB on the MuSiQue subset: indexing, retrieval,
HNSW, disk, memory, open.

    python -m reproduce backends [--data DIR] [--work DIR] [--repeats 3] [--encoder real|fake]
                                 [--backends sqlite,postgres,falkordb]

1. index(): the 1,890 passages with the released OpenIE file (no LLM call) into SQLite, an
   embedded PostgreSQL and an embedded FalkorDB (fresh folders; ``--backends`` picks among the
   server backends, SQLite is always the reference). The encoder remembers every vector (``MemoEncoder``):
   a first SQLite index (``prime``) computes them, then the timed indexes, back to back, get
   the same vectors without a forward pass, so their difference is the storage's.
2. retrieval of the questions (filter off, query encoding excluded): one batched call and one
   call per question (p50/p95), the backends alternating; each question's top-20 passages and
   float scores compared with SQLite's (the retriever's arrays and ``retrieve()``'s solutions).
   Then the memory of each embedded server (its processes' RSS and Pss; FalkorDB's own count,
   ``INFO memory``) with the index open.
3. HNSW on the PostgreSQL index (``ensure_hnsw``), fact store (queries encoded for facts) and
   passage store: ``nearest(k)`` against ``nearest(k, exact=True)`` for k = 5, 20, 100:
   recall@k and p50 latency, beside the in-memory exact top-k. End to end: the retriever's fact
   candidates taken from ``nearest`` (HNSW, or the exact scan as a control), passage Recall@k.
   Only with PostgreSQL among the backends.
4. disk size of each index (FalkorDB's: its append-only file); a second process opening each
   index and running a first query.

Every timing carries the 1-minute load average (2 shared cores). Results:
``reproduce/results/backends/musique.json`` and ``README.md``.
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from ..common import MUSIQUE_TRAIN_DIR, REPO_ROOT, RESULTS_DIR, load_average, module_main, write_result
from ..harness import option
from .backends_measure import (
    TOP,
    end_to_end,
    hnsw_vs_exact,
    load1,
    pg_sizes,
    same_rankings,
    time_search,
    timed,
    top_passages,
)
from .backends_report import render
from .reliability import MemoEncoder, make_encoder, open_engine, real_encoder
from .servers import STORAGES, data_dir, falkordb_used_memory, server_memory

OUT_DIR = RESULTS_DIR / "backends"
BACKENDS = STORAGES


def dir_bytes(path: Path) -> int:
    """Bytes of the files under ``path``."""
    return sum(p.stat().st_size for p in Path(path).rglob("*") if p.is_file())


def work_dir(given: Path | None) -> Path:
    """The folder of the indexes: ``--work``, or a new temporary one that the PostgreSQL
    server's user (``nobody`` when run as root) can traverse."""
    if given is not None:
        Path(given).mkdir(parents=True, exist_ok=True)
        return Path(given)
    base = Path(tempfile.mkdtemp(prefix="hippo-backends-"))
    if os.geteuid() == 0:
        base.chmod(0o711)
    return base


def engine(save: Path, encoder, backend: str, search: str = "exact"):
    """The engine on ``save`` with the given backend (no LLM, filter off); PostgreSQL is read by
    the lazy reader with exact search in the database unless ``search`` says otherwise."""
    kw = {"storage": backend} if backend != "sqlite" else {}
    return open_engine(save, encoder, **kw, **({"postgres_search": search} if backend == "postgres" else {}))


def backend_list(text: str) -> tuple[str, ...]:
    """``--backends``: SQLite first (the reference), then the others named, in the order of :data:`BACKENDS`."""
    names = {x.strip() for x in text.split(",") if x.strip()}
    unknown = names - set(BACKENDS)
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown backend(s) {sorted(unknown)}; choose among {list(BACKENDS)}")
    return tuple(b for b in BACKENDS if b == "sqlite" or b in names)


# ------------------------------------------------------------------ open in a second process
def child_open(args) -> int:
    """Open an index in this fresh process and run a first query; print JSON."""
    from hippo_engine.evaluation.datasets import load_dataset
    q = load_dataset(args.data).questions[0]
    load0 = load1()
    rag, ctor = timed(engine, args.work, make_encoder(args.encoder), args.storage)
    _, load = timed(lambda: (rag.index_state.stores, rag.graph))
    enc, model = timed(lambda: rag.encoder)
    sols, first = timed(rag.retrieve, [q], TOP)
    _, close = timed(rag.close)
    print(json.dumps({"construct_s": round(ctor, 3), "load_stores_graph_s": round(load, 3),
                      "open_s": round(ctor + load, 3), "model_load_s": round(model, 3),
                      "first_query_s": round(first, 3), "close_s": round(close, 3), "top": sols[0].passage_ids[:5],
                      "loads": [load0, load1()]}))
    return 0


def run_child(args, backend: str, save: Path) -> dict:
    """``child_open`` in a new Python process; a failed one is recorded (``error``: the last line of
    its error output), not raised, so the run's other figures are kept."""
    cmd = [sys.executable, "-m", "reproduce.bench.backends", "--child-open", "--storage", backend, "--work",
           str(save), "--data", str(args.data), "--encoder", args.encoder]
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    t = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    if out.returncode != 0:
        lines = out.stderr.strip().splitlines() or [f"exit status {out.returncode}"]
        return {"error": next((x for x in reversed(lines) if "Error" in x), lines[-1])[:600],
                "process_s": round(time.perf_counter() - t, 2)}
    res = json.loads(out.stdout.strip().splitlines()[-1])
    res["process_s"] = round(time.perf_counter() - t, 2)
    return res


# ------------------------------------------------------------------ the run
def measure(args, encoder=None, log=print) -> dict:
    """Every figure of the report (see the module documentation). On an error, the engines
    opened are closed (stopping the embedded server) and a temporary folder is removed."""
    work, opened = work_dir(args.work), []
    try:
        return _measure(args, encoder, log, work, opened)
    except BaseException:
        for rag in opened:
            try:
                rag.close()
            except Exception:  # noqa: BLE001 - already closed, or the error being raised broke it
                pass
        if args.work is None and not args.keep:
            shutil.rmtree(work, ignore_errors=True)
        raise


def _measure(args, encoder, log, work: Path, opened: list) -> dict:
    """The run of :func:`measure`; every engine it opens is appended to ``opened``."""
    from hippo_engine.evaluation.datasets import load_dataset
    ds = load_dataset(args.data)
    if encoder is None:
        encoder = real_encoder() if args.encoder == "real" else make_encoder(args.encoder)
    enc = MemoEncoder(encoder)
    res = {"data": {"passages": len(ds.docs), "questions": len(ds.questions), "openie": ds.openie_file.name},
           "encoder": repr(encoder), "load_start": load_average(), "backends": list(args.backends),
           "index": {"prime_sqlite_with_encoding": prime(work, enc, ds, opened, log)}}
    saves = {b: work / b for b in args.backends}
    rags = {}
    for b in args.backends:
        rags[b], res["index"][b] = index_one(saves[b], enc, b, ds, opened)
        log(f"{b}: index {res['index'][b]['index_s']:.1f}s {res['index'][b]}")
    questions, gold = list(ds.questions), [list(dict.fromkeys(g)) for g in ds.gold_docs]
    q_fact, q_pass = rags["sqlite"].encode_queries(questions)
    k = rags["sqlite"].config.retrieval_top_k
    res["retrieval"], raw = time_search({b: r.retriever for b, r in rags.items()}, questions, q_fact, q_pass, k,
                                        args.repeats)
    sols = {b: rags[b].retrieve(questions, TOP, gold_docs=gold) for b in args.backends}
    tops = {b: top_passages(rags[b], raw[b]) for b in args.backends}
    res["same"] = {"questions": len(questions), **{b: same_rankings(tops, sols, "sqlite", b)
                                                    for b in args.backends if b != "sqlite"}}
    res["recall"] = {b: {kk: round(100 * v, 2) for kk, v in sols[b][1].items()} for b in args.backends}
    log(f"retrieval {res['retrieval']} same {res['same']}")
    res["memory"] = {b: memory(b, saves[b]) for b in args.backends if b != "sqlite"}
    res["disk"] = {}
    if "postgres" in rags:
        postgres_parts(res, rags["postgres"], questions, (q_fact, q_pass, k), gold, raw["postgres"], args, log)
    for b in args.backends:
        rags[b].close()
    res["disk"].update(disk(saves))
    res["open"] = {b: [] for b in args.backends}
    for _ in range(args.child_rounds):
        for b in args.backends:
            res["open"][b].append(run_child(args, b, saves[b]))
            log(f"open {b}: {res['open'][b][-1]}")
    res["load_end"] = load_average()
    if args.work is None and not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return res


def prime(work: Path, enc: MemoEncoder, ds, opened: list, log) -> dict:
    """A first SQLite index that computes every vector (remembered by ``enc``); its figures."""
    rag = engine(work / "prime_sqlite", enc, "sqlite")
    opened.append(rag)
    rag.import_openie(ds.openie_file)
    l0 = load1()
    rep, s = timed(rag.index, list(ds.docs))
    rag.close()
    t = rep["timings"]
    out = {"index_s": round(s, 2), "embed_s": round(sum(v for kk, v in t.items() if kk.startswith("embed")), 2),
           "timings": {kk: round(v, 3) for kk, v in t.items()}, "loads": [l0, load1()]}
    log(f"prime index (encoding) {s:.1f}s {out}")
    return out


def index_one(save: Path, enc: MemoEncoder, backend: str, ds, opened: list) -> tuple:
    """(the engine on ``save``, its index figures): a new index of the dataset with remembered vectors."""
    l0 = load1()
    rag, ctor = timed(engine, save, enc, backend)
    opened.append(rag)
    rag.import_openie(ds.openie_file)
    rep, s = timed(rag.index, list(ds.docs))
    t = rep["timings"]
    return rag, {"construct_s": round(ctor, 2), "index_s": round(s, 2),
                 "embed_s": round(sum(v for kk, v in t.items() if kk.startswith("embed")), 3),
                 "timings": {kk: round(v, 3) for kk, v in t.items()}, "loads": [l0, load1()],
                 "added": rep["added"], "entities": rep["new_entities"], "facts": rep["new_facts"]}


def memory(backend: str, save: Path) -> dict:
    """The memory of the embedded server of ``save`` with its index open (FalkorDB: with its own
    ``used_memory``), and the load."""
    data = data_dir(backend, save)
    out = {**server_memory(data), "load": load1()}
    if backend == "falkordb":
        out["used_memory"] = falkordb_used_memory(data)
    return out


def postgres_parts(res: dict, rag, questions, queries: tuple, gold, reference, args, log) -> None:
    """The PostgreSQL-only figures into ``res``: sizes in the database before and after the HNSW
    indexes, HNSW against the exact scan, the engine's HNSW mode end to end."""
    q_fact, q_pass, k = queries
    res["disk"]["postgres_before_hnsw"] = pg_sizes(rag)
    res["hnsw"] = hnsw_vs_exact(rag, q_fact, q_pass, args.hnsw_queries)
    log(f"hnsw {json.dumps(res['hnsw'])}")
    res["end_to_end"] = end_to_end(rag, questions, q_fact, q_pass, k, gold, reference)
    log(f"end to end {res['end_to_end']}")
    res["disk"]["postgres_with_hnsw"] = pg_sizes(rag)


def disk(saves: dict[str, Path]) -> dict:
    """Bytes on disk of each closed index: the folders, PostgreSQL's WAL, FalkorDB's append-only
    file and snapshots, SQLite's files."""
    out: dict = {"folders": {b: dir_bytes(p) for b, p in saves.items()}}
    if "postgres" in saves:
        out["postgres_wal"] = sum(dir_bytes(p) for p in saves["postgres"].rglob("pg_wal") if p.is_dir())
    if "falkordb" in saves:
        data = data_dir("falkordb", saves["falkordb"])
        out["falkordb_files"] = {"append-only file": dir_bytes(data / "appendonlydir"),
                                 "RDB snapshots": sum(p.stat().st_size for p in data.glob("*.rdb")),
                                 "beside the server (job tables, graph file, identity)":
                                     dir_bytes(saves["falkordb"]) - dir_bytes(data)}
    out["sqlite_files"] = {p.name: p.stat().st_size for p in saves["sqlite"].iterdir() if p.is_file()}
    return out


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The command's options."""
    ap.add_argument("--data", type=Path, default=MUSIQUE_TRAIN_DIR, help="the dataset (default %(default)s)")
    ap.add_argument("--work", type=Path, default=None, help="folder of the indexes (default: a new temporary one, "
                    "removed at the end); the PostgreSQL server's user must be able to traverse its parents")
    ap.add_argument("--keep", action="store_true", help="keep the temporary folder")
    option(ap, "--encoder")
    ap.add_argument("--repeats", type=int, default=3, help="retrieval timing passes per backend (default 3)")
    ap.add_argument("--hnsw-queries", type=int, default=100, help="questions for the HNSW figures (default 100)")
    ap.add_argument("--child-rounds", type=int, default=2, help="second-process opens per backend (default 2)")
    ap.add_argument("--out-dir", type=Path, default=OUT_DIR, help="results folder (default %(default)s)")
    ap.add_argument("--name", default="musique", help="JSON file name (default %(default)s)")
    ap.add_argument("--child-open", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--backends", type=backend_list, default=BACKENDS,
                    help="the backends compared, comma-separated (default: " + ",".join(BACKENDS) + "; sqlite, the "
                         "reference, is always measured)")
    ap.add_argument("--storage", choices=BACKENDS, default="sqlite", help=argparse.SUPPRESS)


def run(args: argparse.Namespace, argv: Sequence[str], encoder=None) -> int:
    """Measure; write ``<out-dir>/<name>.json`` and ``<out-dir>/README.md``."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    if args.child_open:
        return child_open(args)
    res = measure(args, encoder, log=lambda s: print(s, flush=True))
    command = " ".join(["python -m reproduce", *([] if argv and argv[0] == "backends" else ["backends"]),
                        shlex.join(argv)]).strip()
    res["command"] = command
    out = Path(args.out_dir)
    write_result(out / f"{args.name}.json", json.dumps(res, indent=1, ensure_ascii=True))
    write_result(out / "README.md", render(res, command))
    print(f"written: {out / (args.name + '.json')}, {out / 'README.md'}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m {__name__}``: the same as ``python -m reproduce backends``."""
    return module_main(sys.modules[__name__], argv)


if __name__ == "__main__":
    raise SystemExit(main())
