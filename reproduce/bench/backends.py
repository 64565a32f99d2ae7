"""SQLite against PostgreSQL + pgvector on the MuSiQue subset: indexing, retrieval, HNSW, disk, open.

    python -m reproduce backends [--data DIR] [--work DIR] [--repeats 3] [--encoder real|fake]

1. index(): the 1,890 passages with the released OpenIE file (no LLM call) into SQLite and into
   an embedded PostgreSQL (fresh folders). The encoder remembers every vector (``MemoEncoder``):
   a first SQLite index (``prime``) computes them, then the two timed indexes, back to back, get
   the same vectors without a forward pass, so their difference is the storage's.
2. retrieval of the questions (filter off, query encoding excluded): one batched call and one
   call per question (p50/p95), the backends alternating; each question's top-20 passages and
   float scores compared (the retriever's arrays and ``retrieve()``'s solutions).
3. HNSW on the PostgreSQL index (``ensure_hnsw``), fact store (queries encoded for facts) and
   passage store: ``nearest(k)`` against ``nearest(k, exact=True)`` for k = 5, 20, 100:
   recall@k and p50 latency, beside the in-memory exact top-k. End to end: the retriever's fact
   candidates taken from ``nearest`` (HNSW, or the exact scan as a control), passage Recall@k.
4. disk size of each index; a second process opening each index and running a first query.

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

import numpy as np

from ..common import MUSIQUE_TRAIN_DIR, REPO_ROOT, RESULTS_DIR, load_average, module_main, write_result
from ..harness import option
from .backends_report import render
from .reliability import MemoEncoder, make_encoder, open_engine, real_encoder

OUT_DIR = RESULTS_DIR / "backends"
BACKENDS = ("sqlite", "postgres")
KS = (5, 20, 100)
TOP = 20


def load1() -> float:
    """The 1-minute load average."""
    return round(os.getloadavg()[0], 2)


def timed(fn, *a, **kw):
    """``(fn(*a, **kw), wall seconds)``."""
    t = time.perf_counter()
    out = fn(*a, **kw)
    return out, time.perf_counter() - t


def pct(xs, q) -> float:
    """The ``q``-th percentile of ``xs`` in milliseconds."""
    return round(1000 * float(np.percentile(np.asarray(xs), q)), 3)


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
    return open_engine(save, encoder, **({"storage": "postgres", "postgres_search": search}
                                          if backend == "postgres" else {}))


def pg_sizes(rag) -> dict:
    """Bytes in PostgreSQL: the database, this index's schema (tables with their indexes), HNSW indexes."""
    db = rag.index_state.db
    c = db.conn
    out = {"database": int(c.execute("SELECT pg_database_size(current_database())").fetchone()[0]),
           "schema": int(c.execute("SELECT COALESCE(SUM(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
                                   "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s "
                                   "AND c.relkind = 'r'", (db.schema,)).fetchone()[0])}
    for ns in ("fact", "passage"):
        row = c.execute("SELECT pg_relation_size(to_regclass(%s))", (f"{db.q}.store_{ns}_hnsw",)).fetchone()
        out[f"hnsw_{ns}"] = int(row[0] or 0)
    return out


# ------------------------------------------------------------------ retrieval
def time_search(rs: dict, questions, q_fact, q_pass, k: int, repeats: int) -> tuple[dict, dict]:
    """Batched and per-query ``Retriever.search`` timings, backends alternating; last results."""
    tim = {b: {"batch_ms": [], "single_ms": [], "loads": []} for b in rs}
    res = {}
    for r in rs.values():
        r.search(questions[:2], q_fact[:2], q_pass[:2], k, None)          # warm-up
    for _ in range(repeats):
        for b, r in rs.items():
            tim[b]["loads"].append(load1())
            res[b], s = timed(r.search, questions, q_fact, q_pass, k, None)
            tim[b]["batch_ms"].append(1000 * s / len(questions))
            for j, q in enumerate(questions):
                _, s = timed(r.search, [q], q_fact[j:j + 1], q_pass[j:j + 1], k, None)
                tim[b]["single_ms"].append(s)
    out = {b: {"batch_ms_best": round(min(t["batch_ms"]), 3), "batch_ms_all": [round(x, 3) for x in t["batch_ms"]],
               "single_p50_ms": pct(t["single_ms"], 50), "single_p95_ms": pct(t["single_ms"], 95),
               "single_mean_ms": round(1000 * float(np.mean(t["single_ms"])), 3), "loads": t["loads"]}
           for b, t in tim.items()}
    return out, {b: x[0] for b, x in res.items()}


def top_passages(rag, raw) -> list[tuple[list[str], bytes]]:
    """Each result's top-20 passage ids and the bytes of their float scores."""
    ids = rag.index_state.stores["passage"].ids
    return [(list(ids[x.order[:TOP]]), np.asarray(x.scores[:TOP]).tobytes()) for x in raw]


def recall(rag, raw, gold) -> dict:
    """Passage Recall@1/2/5/10/20 (%) of raw retriever results."""
    from hippo_engine.evaluation.metrics import recall_at_k
    st = rag.index_state.stores["passage"]
    texts = [[st.text(p) for p in st.ids[x.order[:TOP]]] for x in raw]
    m = recall_at_k(texts, gold, (1, 2, 5, 10, 20))
    return {k: round(100 * v, 2) for k, v in m.items()}


# ------------------------------------------------------------------ HNSW
def hnsw_vs_exact(rag, q_fact, q_pass, n_queries: int) -> dict:
    """Recall@k and latency of ``nearest`` (HNSW) against the exact scan and the in-memory top-k."""
    from hippo_engine.retrieve.scoring import top_k
    r = rag.retriever
    st = rag.index_state.stores
    out = {}
    for ns, q in (("fact", q_fact[:n_queries]), ("passage", q_pass[:n_queries])):
        store = st[ns]
        load0 = load1()
        _, build = timed(store.ensure_hnsw)
        res = {"rows": len(store), "hnsw_build_s": round(build, 2), "build_load": [load0, load1()], "k": {}}
        for exact in (False, True):
            store.nearest(q[:1], 5, exact=exact)                          # warm-up
        for k in KS:
            got = {"hnsw": [], "exact": [], "memory": []}
            lat = {"hnsw": [], "exact": [], "memory": []}
            loads = [load1()]
            for j in range(len(q)):
                for mode in ("hnsw", "exact"):
                    (ids, _), s = timed(store.nearest, q[j:j + 1], k, exact=mode == "exact")
                    got[mode].append([x for x in ids[0] if x is not None])
                    lat[mode].append(s)
                if ns == "fact":
                    (rows, _), s = timed(r.top_facts, q[j:j + 1], k)
                    rows = rows[0]
                else:
                    rows, s = timed(lambda qq, kk: top_k(r.dense_scores(qq)[:, 0], kk), q[j:j + 1], k)
                ids_mem = (r.fact_ids if ns == "fact" else st["passage"].ids)[np.asarray(rows, np.int64)]
                got["memory"].append([x.decode() if isinstance(x, bytes) else x for x in ids_mem])
                lat["memory"].append(s)
            loads.append(load1())
            rec = [len(set(h) & set(e)) / max(1, len(e)) for h, e in zip(got["hnsw"], got["exact"], strict=True)]
            res["k"][str(k)] = {
                "recall": round(float(np.mean(rec)), 4), "min_recall": round(float(np.min(rec)), 4),
                "queries_all_found": int(sum(x == 1.0 for x in rec)),
                "exact_scan_equals_memory": int(sum(a == b for a, b in zip(got["exact"], got["memory"], strict=True))),
                **{f"{m}_p50_ms": pct(v, 50) for m, v in lat.items()},
                **{f"{m}_p95_ms": pct(v, 95) for m, v in lat.items()}, "loads": loads}
        out[ns] = res
    return out


def end_to_end(rag, questions, q_fact, q_pass, k, gold, reference) -> dict:
    """The engine's own lazy PostgreSQL reader with ``postgres_search="hnsw"`` (fact candidates
    and the normalisation minimum from the HNSW index, rescored exactly) against the reference
    rankings (``postgres_search="exact"``, equal to SQLite)."""
    ref = top_passages(rag, reference)
    out = {"exact": {"recall": recall(rag, reference, gold)}}
    exact_config = rag.config
    rag.config = exact_config.replace(postgres_search="hnsw")
    try:
        (raw, _), s = timed(rag.retriever.search, questions, q_fact, q_pass, k, None)
        single, loads = [], [load1()]
        for j, q in enumerate(questions):                 # one query per call, as an app asks
            _, t = timed(rag.retriever.search, [q], q_fact[j:j + 1], q_pass[j:j + 1], k, None)
            single.append(t)
        loads.append(load1())
        mine = top_passages(rag, raw)
        out["hnsw"] = {"recall": recall(rag, raw, gold), "search_s": round(s, 2),
                       "same_top20_and_scores": sum(a == b for a, b in zip(mine, ref, strict=True)),
                       "same_top20_ids": sum(a[0] == b[0] for a, b in zip(mine, ref, strict=True)),
                       "same_top5_ids": sum(a[0][:5] == b[0][:5] for a, b in zip(mine, ref, strict=True)),
                       "same_candidate_facts": sum(a.candidate_facts == b.candidate_facts
                                                   for a, b in zip(raw, reference, strict=True)),
                       "single_p50_ms": pct(single, 50), "single_p95_ms": pct(single, 95), "single_loads": loads}
    finally:
        rag.config = exact_config
    return out


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
    """``child_open`` in a new Python process."""
    cmd = [sys.executable, "-m", "reproduce.bench.backends", "--child-open", "--storage", backend, "--work",
           str(save), "--data", str(args.data), "--encoder", args.encoder]
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    t = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    if out.returncode != 0:
        raise RuntimeError(f"child failed: {out.stderr[-3000:]}")
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
    docs, questions = list(ds.docs), list(ds.questions)
    gold = [list(dict.fromkeys(g)) for g in ds.gold_docs]
    if encoder is None:
        encoder = real_encoder() if args.encoder == "real" else make_encoder(args.encoder)
    enc = MemoEncoder(encoder)
    res = {"data": {"passages": len(docs), "questions": len(questions), "openie": ds.openie_file.name},
           "encoder": repr(encoder), "load_start": load_average(), "index": {}}
    prime = engine(work / "prime_sqlite", enc, "sqlite")
    opened.append(prime)
    prime.import_openie(ds.openie_file)
    l0 = load1()
    rep, s = timed(prime.index, docs)
    prime.close()
    t = rep["timings"]
    res["index"]["prime_sqlite_with_encoding"] = {
        "index_s": round(s, 2), "embed_s": round(sum(v for kk, v in t.items() if kk.startswith("embed")), 2),
        "timings": {kk: round(v, 3) for kk, v in t.items()}, "loads": [l0, load1()]}
    log(f"prime index (encoding) {s:.1f}s {res['index']['prime_sqlite_with_encoding']}")
    rags, saves = {}, {b: work / b for b in BACKENDS}
    for b in BACKENDS:
        l0 = load1()
        rags[b], ctor = timed(engine, saves[b], enc, b)
        opened.append(rags[b])
        rags[b].import_openie(ds.openie_file)
        rep, s = timed(rags[b].index, docs)
        t = rep["timings"]
        res["index"][b] = {"construct_s": round(ctor, 2), "index_s": round(s, 2),
                           "embed_s": round(sum(v for kk, v in t.items() if kk.startswith("embed")), 3),
                           "timings": {kk: round(v, 3) for kk, v in t.items()}, "loads": [l0, load1()],
                           "added": rep["added"], "entities": rep["new_entities"], "facts": rep["new_facts"]}
        log(f"{b}: index {s:.1f}s {res['index'][b]}")
    q_fact, q_pass = rags["sqlite"].encode_queries(questions)
    k = rags["sqlite"].config.retrieval_top_k
    rs = {b: rags[b].retriever for b in BACKENDS}
    res["retrieval"], raw = time_search(rs, questions, q_fact, q_pass, k, args.repeats)
    tops = {b: top_passages(rags[b], raw[b]) for b in BACKENDS}
    sols = {b: rags[b].retrieve(questions, TOP, gold_docs=gold) for b in BACKENDS}
    res["same"] = {
        "retriever_top20_ids_and_scores": sum(a == b for a, b in zip(tops["sqlite"], tops["postgres"], strict=True)),
        "retrieve_top20_docs_and_scores": sum(
            a.docs == b.docs and np.asarray(a.doc_scores).tobytes() == np.asarray(b.doc_scores).tobytes()
            for a, b in zip(sols["sqlite"][0], sols["postgres"][0], strict=True)),
        "questions": len(questions)}
    res["recall"] = {b: {kk: round(100 * v, 2) for kk, v in sols[b][1].items()} for b in BACKENDS}
    log(f"retrieval {res['retrieval']} same {res['same']}")
    res["disk"] = {"postgres_before_hnsw": pg_sizes(rags["postgres"])}
    res["hnsw"] = hnsw_vs_exact(rags["postgres"], q_fact, q_pass, args.hnsw_queries)
    log(f"hnsw {json.dumps(res['hnsw'])}")
    res["end_to_end"] = end_to_end(rags["postgres"], questions, q_fact, q_pass, k, gold, raw["postgres"])
    log(f"end to end {res['end_to_end']}")
    res["disk"]["postgres_with_hnsw"] = pg_sizes(rags["postgres"])
    for b in BACKENDS:
        rags[b].close()
    res["disk"]["folders"] = {b: dir_bytes(saves[b]) for b in BACKENDS}
    wal = [p for p in saves["postgres"].rglob("pg_wal") if p.is_dir()]
    res["disk"]["postgres_wal"] = sum(dir_bytes(p) for p in wal)
    res["disk"]["sqlite_files"] = {p.name: p.stat().st_size for p in saves["sqlite"].iterdir() if p.is_file()}
    res["open"] = {b: [] for b in BACKENDS}
    for _ in range(args.child_rounds):
        for b in BACKENDS:
            res["open"][b].append(run_child(args, b, saves[b]))
            log(f"open {b}: {res['open'][b][-1]}")
    res["load_end"] = load_average()
    if args.work is None and not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return res


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
