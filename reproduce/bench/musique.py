"""Indexing speed, retrieval speed, memory and PPR agreement on the MuSiQue training subset.

    python -m reproduce bench-musique [--data DIR] [--work DIR] [--storage-dtype float16]
                                      [--mmap] [--embedding-dtype bfloat16] [--out FILE]

One command, measured against the figures of the reference implementation on this machine
(HippoRAG 2 code, all-MiniLM-L6-v2, 2-core AMD EPYC):

1. index(): the 1,890 passages from the released GPT-3.5 OpenIE file into a fresh directory,
   model load excluded; wall and CPU seconds per stage, texts/s and tokens/s of each
   embedding stage. Reference: 312 s (301 s embedding, batch 64, float32, padded).
2. retrieval per query on the 100 questions, query encoding and recognition filter excluded
   (``use_filter=False``): one query at a time and all in one batch. Reference: ~39 ms.
3. the ranking of our PPR (``ppr_backend="power"``) against igraph's PRPACK
   (``ppr_backend="igraph"``): same top-10 passages for every question?
4. Recall@k of HippoRAG 2 (no filter) and of dense retrieval on the 100 questions.
5. peak RSS of this process (index + retrieve; reference 2.9 GB) and of fresh processes that
   load the index and retrieve (reference 1.3 GB), with the stores in RAM and memory-mapped.
6. bytes per passage on disk and in RAM.

Every timing carries the machine's load average (``os.getloadavg``) from before and after it:
the box is shared, and with 2 cores a load above ~1 means another process takes CPU time
from this one. CPU seconds (all threads of this process) are reported beside wall seconds.
Results go to ``reproduce/results/bench_musique.md`` (``bench_musique_float16_mmap.md`` etc. for
the variants; ``--out`` to choose).
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import shlex
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ..common import (
    REPO_ROOT,
    RESULTS_DIR,
    ForbiddenLLM,
    commit_label,
    load_average,
    peak_rss_mb,
    rss_mb,
    write_result,
)
from ..harness import option

DEFAULT_OUT = RESULTS_DIR / "bench_musique.md"
REF = {"index_s": 312.0, "embed_s": 301.0, "retrieve_ms": 39.0, "peak_index_retrieve_gb": 2.9,
       "peak_load_retrieve_gb": 1.3}
KS = (1, 2, 5, 10, 20)


class Timer:
    """Wall and CPU seconds of a block, with the 1-minute load average before and after."""

    def __enter__(self):
        self.load0 = os.getloadavg()[0]
        self.t0, self.c0 = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc):
        self.wall = time.perf_counter() - self.t0
        self.cpu = time.process_time() - self.c0
        self.load1 = os.getloadavg()[0]

    @property
    def loads(self) -> str:
        return f"{self.load0:.2f} -> {self.load1:.2f}"


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def git_commit() -> str:
    """The report's commit: short hash, ``+dirty`` when tracked files differ."""
    return commit_label("+dirty", "unknown")


def open_rag(work: Path, args, **extra):
    """The index at ``work`` with the stores as the options say; any LLM call is an error."""
    from hippo_engine import HippoRAG

    return HippoRAG(work, llm=ForbiddenLLM(), extractor="openie", show_progress=False, use_filter=False,
                    embedding_storage_dtype=args.storage_dtype, embedding_mmap=args.mmap,
                    embedding_dtype=args.embedding_dtype, **extra)


def dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.exists() else 0


def search_all(r, questions, q_fact, q_pass, k: int, batch: bool):
    """Rankings (store rows) and seconds per query, filter off, encoding excluded."""
    t = time.perf_counter()
    if batch:
        results, _ = r.search(questions, q_fact, q_pass, k, None)
    else:
        results = []
        for j, q in enumerate(questions):
            res, _ = r.search([q], q_fact[j:j + 1], q_pass[j:j + 1], k, None)
            results.extend(res)
    return results, (time.perf_counter() - t) / len(questions)


def recall(rankings: list[list[str]], gold: list[list[str]]) -> dict[int, float]:
    from hippo_engine.evaluation.metrics import recall_at_k

    m = recall_at_k(rankings, gold, KS)
    return {k: 100 * m[f"Recall@{k}"] for k in KS}


# ------------------------------------------------------------------ child: load + retrieve
def child(args) -> int:
    """Open an existing index in this fresh process, encode the questions, retrieve; print JSON."""
    from hippo_engine.evaluation.datasets import load_dataset

    ds = load_dataset(args.data)
    t0 = time.perf_counter()
    rag = open_rag(args.work, args)
    st = rag.index_state.stores
    _ = rag.graph
    t_open = time.perf_counter() - t0
    sols = rag.retrieve(list(ds.questions))  # loads the encoder, encodes, retrieves (no filter)
    t_all = time.perf_counter() - t0
    kinds = {ns: type(s.matrix).__name__ + "/" + str(s.matrix.dtype) for ns, s in st.items()}
    nb = {ns: s.nbytes() for ns, s in st.items()}
    print(json.dumps({"peak_rss_mb": peak_rss_mb(), "rss_mb": rss_mb(), "open_s": t_open, "total_s": t_all,
                      "matrices": kinds, "nbytes": nb, "top1": [s.docs[0] for s in sols][:3]}))
    return 0


def run_child(args, mmap: bool) -> dict:
    cmd = [sys.executable, "-m", "reproduce", "bench-musique", "--child-load", "--work", str(args.work),
           "--data", str(args.data), "--storage-dtype", args.storage_dtype,
           "--embedding-dtype", args.embedding_dtype] + (["--mmap"] if mmap else [])
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800)
    if out.returncode != 0:
        raise RuntimeError(f"child failed: {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


# ------------------------------------------------------------------ main
def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The ``bench-musique`` command's options."""
    option(ap, "--data")
    ap.add_argument("--work", type=Path, default=Path("outputs/bench_musique"), help="index folder (emptied first)")
    ap.add_argument("--storage-dtype", default="float32", choices=("float32", "float16"))
    ap.add_argument("--mmap", action="store_true", help="memory-map the stores (index and retrieval)")
    ap.add_argument("--embedding-dtype", default="float32", choices=("float32", "bfloat16"))
    ap.add_argument("--repeats", type=int, default=3, help="retrieval timing: best of N passes")
    ap.add_argument("--no-children", action="store_true", help="skip the fresh-process load+retrieve runs")
    ap.add_argument("--out", type=Path, default=None,
                    help="report file (default reproduce/results/bench_musique[_variant].md)")
    ap.add_argument("--child-load", action="store_true", help=argparse.SUPPRESS)


def run(args: argparse.Namespace, argv: Sequence[str]) -> int:
    """Index, retrieve, compare with igraph, measure memory; write the report."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    if args.child_load:
        return child(args)
    if args.out is None:
        variant = "".join(f"_{x}" for x in (
            args.storage_dtype if args.storage_dtype != "float32" else "",
            "mmap" if args.mmap else "", args.embedding_dtype if args.embedding_dtype != "float32" else "") if x)
        args.out = DEFAULT_OUT.with_name(f"bench_musique{variant}.md")

    import shutil

    import torch

    from hippo_engine.evaluation.datasets import load_dataset

    command = "python -m reproduce " + shlex.join(argv)
    started = _dt.datetime.now().strftime("%Y-%m-%d %H:%M")
    load_start = load_average()
    ds = load_dataset(args.data)
    gold = [list(dict.fromkeys(g)) for g in ds.gold_docs]
    questions = list(ds.questions)
    shutil.rmtree(args.work, ignore_errors=True)
    rag = open_rag(args.work, args)
    rag.import_openie(ds.openie_file)
    with Timer() as t_load:
        enc = rag.encoder  # model load: excluded from the index time
    print(f"embedder loaded in {t_load.wall:.1f}s: {enc!r}; torch threads {torch.get_num_threads()}", flush=True)

    # 1. index
    with Timer() as t_index:
        rep = rag.index(list(ds.docs))
    timings = rep["timings"]
    rss_after_index, peak_after_index = rss_mb(), peak_rss_mb()
    print(f"indexed {rep['added']} passages in {t_index.wall:.1f}s (cpu {t_index.cpu:.1f}s, load {t_index.loads}): "
          + json.dumps({k: round(v, 2) for k, v in timings.items()}), flush=True)
    st = rag.index_state.stores
    counts = {"passages": rep["added"], "entities": rep["new_entities"], "facts": rep["new_facts"]}
    tokens = {"passages": sum(len(x) for x in enc.tokenize([st["passage"].text(k) for k in st["passage"].ids])),
              "entities": sum(len(x) for x in enc.tokenize([st["entity"].text(k) for k in st["entity"].ids])),
              "facts": sum(len(x) for x in enc.tokenize([st["fact"].text(k) for k in st["fact"].ids]))}
    stage_of = {"passages": "embed_passages", "entities": "embed_entities", "facts": "embed_facts"}

    # 2. retrieval (query encoding and filter excluded)
    with Timer() as t_qenc:
        q_fact, q_pass = rag.encode_queries(questions)
    with Timer() as t_build:
        r = rag.retriever
    k = rag.config.retrieval_top_k
    search_all(r, questions[:5], q_fact[:5], q_pass[:5], k, batch=False)  # warm-up
    single, batched = [], []
    with Timer() as t_ret:
        for _ in range(args.repeats):
            res_single, s = search_all(r, questions, q_fact, q_pass, k, batch=False)
            single.append(s)
            res_batch, s = search_all(r, questions, q_fact, q_pass, k, batch=True)
            batched.append(s)
    peak_after_retrieve = peak_rss_mb()
    pids = st["passage"].ids  # rows of the matrices the retriever was built from
    texts = [[st["passage"].text(pids[i]) for i in res.order] for res in res_single]
    same_batch = all(np.array_equal(a.order, b.order) for a, b in zip(res_single, res_batch, strict=False))
    rec_hippo = recall(texts, gold)
    dense_sols = rag.retrieve_dpr(questions)
    rec_dense = recall([s.docs for s in dense_sols], gold)
    fallbacks = sum(bool(x.used_fallback) for x in res_single)
    print(f"retrieval: {1000 * min(single):.2f} ms/query single, {1000 * min(batched):.2f} batched "
          f"(load {t_ret.loads}); R@k {rec_hippo}; dense {rec_dense}", flush=True)

    # 3. PPR agreement with igraph PRPACK
    cfg_power = rag.config
    rag.config = cfg_power.replace(ppr_backend="igraph")
    r_ig = rag.retriever
    with Timer():
        res_ig, s_ig = search_all(r_ig, questions, q_fact, q_pass, k, batch=False)
    rag.config = cfg_power
    agree10 = sum(list(a.order[:10]) == list(b.order[:10]) for a, b in zip(res_single, res_ig, strict=False))
    agree_set10 = sum(set(a.order[:10]) == set(b.order[:10]) for a, b in zip(res_single, res_ig, strict=False))
    agree200 = sum(list(a.order) == list(b.order) for a, b in zip(res_single, res_ig, strict=False))
    max_diff = max(float(np.max(np.abs(np.sort(a.scores) - np.sort(b.scores))))
                   for a, b in zip(res_single, res_ig, strict=False))
    print(f"PPR vs igraph prpack: same top-10 (in order) {agree10}/{len(questions)}, top-200 {agree200}; "
          f"igraph {1000 * s_ig:.1f} ms/query", flush=True)

    # 6. bytes
    db_path = args.work / "index.sqlite"
    n_pass = len(st["passage"])
    blob = {ns: rag.index_state.db.conn.execute(f"SELECT COALESCE(SUM(LENGTH(vec)), 0) FROM store_{ns}").fetchone()[0]
            for ns in st}
    rag.index_state.db.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    disk = {"index.sqlite": db_path.stat().st_size,
            "graph.npz": (args.work / "graph.npz").stat().st_size if (args.work / "graph.npz").exists() else 0,
            "vectors/ (mmap files)": dir_bytes(args.work / "vectors")}
    ram = {ns: s.nbytes() for ns, s in st.items()}
    rows = {ns: len(s) for ns, s in st.items()}
    rag.close()

    # 5. fresh processes: load + retrieve
    children = {}
    if not args.no_children:
        for label, mm in (("stores in RAM", False), ("memory-mapped (first open builds the files)", True),
                          ("memory-mapped", True)):
            with Timer() as t_child:
                children[label] = run_child(args, mm)
            children[label]["loads"] = t_child.loads
            print(f"child [{label}]: {json.dumps(children[label])}", flush=True)

    # ------------------------------------------------------------------ report
    emb_wall = sum(timings[v] for v in stage_of.values())
    idx_total = timings["total"]
    L = []
    L.append("# Indexing and retrieval benchmark on the MuSiQue training subset")
    L.append("")
    L.append(f"Command: `{command}`  ")
    L.append(f"Commit: {git_commit()}; started {started}; machine: {cpu_model()}, {os.cpu_count()} CPU(s), "
             f"Python {platform.python_version()}, torch {torch.__version__}  ")
    L.append(f"Load average (1/5/15 min) at start: {load_start}; at end: {load_average()}. The box is shared: with 2 "
             f"cores, a 1-minute load above ~1 means other processes took CPU time from this run, so wall "
             f"seconds overstate the quiet-machine figure; CPU seconds (all threads of this process) are "
             f"shown beside them.  ")
    L.append(f"Data: {len(ds.docs)} passages, {len(questions)} questions, OpenIE file `{ds.openie_file.name}` "
             f"(no LLM call). Embedder: {enc!r}, model load {t_load.wall:.1f}s (excluded). Stores: "
             f"{args.storage_dtype}{', memory-mapped' if args.mmap else ', in RAM'}. Filter off.")
    L.append("")
    L.append("## Summary against the reference implementation (same machine, same embedder)")
    L.append("")
    L.append("| measure | reference | ours | ratio | goal |")
    L.append("| --- | --- | --- | --- | --- |")
    L.append(f"| index() from the OpenIE file, model load excluded | {REF['index_s']:.0f} s | {idx_total:.1f} s "
             f"(CPU {t_index.cpu:.0f} s; load {t_index.loads}) | {REF['index_s'] / idx_total:.2f}x faster | >= 3x |")
    L.append(f"| of which embedding 35k texts | {REF['embed_s']:.0f} s | {emb_wall:.1f} s | "
             f"{REF['embed_s'] / emb_wall:.2f}x faster | |")
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    L.append(f"| index(): CPU seconds / {cores} cores (what an idle machine would take if all cores were "
             f"busy; an estimate, not a measurement) | {REF['index_s']:.0f} s | {t_index.cpu / cores:.1f} s | "
             f"{REF['index_s'] / (t_index.cpu / cores):.2f}x | |")
    L.append(f"| retrieval per query (no encoding, no filter), one at a time | {REF['retrieve_ms']:.0f} ms | "
             f"{1000 * min(single):.2f} ms | {REF['retrieve_ms'] / (1000 * min(single)):.1f}x faster | >= 10x |")
    L.append(f"| retrieval per query, 100 in one batch | {REF['retrieve_ms']:.0f} ms | {1000 * min(batched):.2f} ms | "
             f"{REF['retrieve_ms'] / (1000 * min(batched)):.1f}x faster | |")
    L.append(f"| peak RSS, index + retrieve (this process) | {REF['peak_index_retrieve_gb']} GB | "
             f"{peak_after_retrieve / 1024:.2f} GB | {peak_after_retrieve / 1024 / REF['peak_index_retrieve_gb']:.2f} "
             f"of it | <= 0.5 |")
    for label, c in children.items():
        L.append(f"| peak RSS, load + retrieve in a fresh process, {label} | {REF['peak_load_retrieve_gb']} GB | "
                 f"{c['peak_rss_mb'] / 1024:.2f} GB | "
                 f"{c['peak_rss_mb'] / 1024 / REF['peak_load_retrieve_gb']:.2f} of it | |")
    L.append(f"| PPR top-10 equal to igraph PRPACK (same passages, same order) | | {agree10}/{len(questions)} "
             "| | all |")
    L.append("")
    L.append("## Index stages")
    L.append("")
    L.append("| stage | wall s |")
    L.append("| --- | --- |")
    for key, v in timings.items():
        L.append(f"| {key} | {v:.2f} |")
    L.append("")
    L.append(f"Whole index() {t_index.wall:.1f} s wall, {t_index.cpu:.1f} s CPU, load {t_index.loads}; "
             f"RSS after index {rss_after_index:.0f} MB, peak {peak_after_index:.0f} MB.")
    L.append("")
    L.append("## Embedding throughput")
    L.append("")
    L.append("| texts | count | tokens | mean tokens | wall s | texts/s | tokens/s |")
    L.append("| --- | --- | --- | --- | --- | --- | --- |")
    for kind, stage in stage_of.items():
        n, tok, w = counts[kind], tokens[kind], timings[stage]
        L.append(f"| {kind} | {n} | {tok} | {tok / max(n, 1):.1f} | {w:.1f} | {n / w:.0f} | {tok / w:.0f} |")
    L.append("")
    L.append("## Retrieval")
    L.append("")
    L.append(f"Best of {args.repeats} passes over the {len(questions)} questions (load {t_ret.loads}): "
             f"{1000 * min(single):.2f} ms/query one at a time (all passes: "
             f"{', '.join(f'{1000 * x:.2f}' for x in single)}), {1000 * min(batched):.2f} ms/query in one batch "
             f"(all: {', '.join(f'{1000 * x:.2f}' for x in batched)}). Retriever build (transition matrix, "
             f"lookups) {t_build.wall:.2f} s once per index version; query encoding "
             f"{1000 * t_qenc.wall / len(questions):.1f} "
             f"ms/query (not included). Single and batched rankings identical: {same_batch}. "
             f"Dense fallback used for {fallbacks} question(s).")
    L.append("")
    L.append(f"PPR against igraph PRPACK (`ppr_backend=\"igraph\"`, {1000 * s_ig:.1f} ms/query): same top-10 "
             f"passages in the same order for {agree10}/{len(questions)} questions, same top-10 set for "
             f"{agree_set10}/{len(questions)}, same top-200 order for {agree200}/{len(questions)}; largest "
             f"difference between sorted top-200 scores {max_diff:.1e}.")
    L.append("")
    L.append("| Recall@k (100 questions, no filter) | " + " | ".join(f"R@{k}" for k in KS) + " |")
    L.append("| --- |" + " --- |" * len(KS))
    L.append("| HippoRAG 2 | " + " | ".join(f"{rec_hippo[k]:.1f}" for k in KS) + " |")
    L.append("| dense | " + " | ".join(f"{rec_dense[k]:.1f}" for k in KS) + " |")
    L.append("")
    L.append("## Memory and disk")
    L.append("")
    vec_ram = sum(v["ram"] for v in ram.values())
    vec_map = sum(v["mapped"] for v in ram.values())
    disk_total = sum(disk.values())
    L.append(f"Rows: {rows}. Vector bytes per passage ({n_pass} passages; entity and fact vectors counted "
             f"against the passages that brought them): on disk in SQLite {sum(blob.values()) / n_pass:.0f} B "
             f"({args.storage_dtype}); in RAM {vec_ram / n_pass:.0f} B, memory-mapped {vec_map / n_pass:.0f} B.  ")
    L.append(f"Whole index on disk: {disk_total / 1e6:.1f} MB = {disk_total / n_pass / 1024:.1f} KiB per passage "
             f"({', '.join(f'{k} {v / 1e6:.1f} MB' for k, v in disk.items())}).")
    L.append("")
    if children:
        L.append("| fresh process: open index, load embedder, encode + retrieve 100 questions | peak RSS MB | "
                 "RSS at end MB | open s | total s | matrices | load |")
        L.append("| --- | --- | --- | --- | --- | --- | --- |")
        for label, c in children.items():
            mats = ", ".join(f"{k}: {v}" for k, v in c["matrices"].items())
            L.append(f"| {label} | {c['peak_rss_mb']:.0f} | {c['rss_mb']:.0f} | {c['open_s']:.2f} | "
                     f"{c['total_s']:.1f} | {mats} | {c['loads']} |")
        L.append("")
        L.append("RSS counts file-backed pages of a memory-mapped matrix once they are touched (a brute-force "
                 "query touches all of them), so mapping lowers the anonymous, unshared part of the RSS rather "
                 "than the peak; the mapped pages are shared page cache that the kernel can drop.")
        L.append("")
    write_result(args.out, "\n".join(L) + "\n")
    print(f"wrote {args.out}")
    return 0
