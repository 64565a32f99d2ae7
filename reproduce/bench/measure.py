"""One corpus of the speed benchmark: ours timed in this process, the reference approach in forked
children at the same index state (so its memory stays out of our peak RSS)."""
from __future__ import annotations

import gc
import multiprocessing as mp
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from hippo_engine.config import HippoConfig
from hippo_engine.ids import chunk_id
from hippo_engine.index.graph import build_graph
from hippo_engine.index.state import IndexState
from hippo_engine.index.stopwatch import Stopwatch
from hippo_engine.index.writer import IndexWriter
from hippo_engine.retrieve.ppr.kernel import PPRKernel
from hippo_engine.retrieve.retriever import Retriever, top_k

from ..common import load_average, peak_rss_mb
from .reference import HippoRAG2Loop, ReferenceRetriever, igraph_single_thread, reference_knn
from .synthetic import LookupEncoder, SyntheticCorpus


def timed(fn, *args, repeat: int = 1, **kwargs):
    """``(best wall seconds over repeat calls, last result)`` of ``fn(*args, **kwargs)``."""
    best, out = float("inf"), None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn(*args, **kwargs)
        best = min(best, time.perf_counter() - t)
    return best, out


def log(msg: str) -> None:
    """A progress line on stderr with the time and the load average."""
    print(f"[{time.strftime('%H:%M:%S')} load {load_average(' ')}] {msg}", file=sys.stderr, flush=True)


def peak_rss_gb() -> float:
    """Peak RSS of this process in GiB."""
    return peak_rss_mb() / 1024


def memory_bandwidth_gbs() -> float:
    """Single-thread streaming read bandwidth (NumPy sum of 256 MB, best of 5)."""
    a = np.ones(256 * 1024 * 1024 // 8)
    t, _ = timed(a.sum, repeat=5)
    return a.nbytes / t / 1e9


def in_child(fn, *args) -> dict:
    """Run ``fn(*args)`` (returning a dict) in a forked child: it sees this process's state, and its
    memory does not count in this process's peak RSS (reference measurements stay out of ours)."""
    ctx = mp.get_context("fork")
    rd, wr = ctx.Pipe(duplex=False)

    def target():
        try:
            wr.send(fn(*args))
        except BaseException as e:  # noqa: BLE001 - reported to the parent
            wr.send({"error": repr(e)})

    proc = ctx.Process(target=target)
    proc.start()
    out = rd.recv()
    proc.join()
    if "error" in out:
        raise RuntimeError(f"reference measurement failed: {out['error']}")
    return out


def _ref_knn_time(mat: np.ndarray, threshold: float, sample: int | None, seed: int) -> tuple[float, str]:
    E = len(mat)
    if sample and sample < E:
        rows = np.sort(np.random.default_rng(seed).choice(E, sample, replace=False))
        t, _ = timed(reference_knn, mat, threshold, rows)
        return t * E / sample, f"extrapolated from {sample:,} of {E:,} rows"
    t, _ = timed(reference_knn, mat, threshold)
    return t, ""


def bench_corpus(name: str, corpus: SyntheticCorpus, n_base: int, inserts: Sequence[int], n_queries: int,
                 ref_queries: int, knn_sample: int | None, work: Path) -> dict:
    """Ours in this process (its peak RSS is ours alone); the reference's measurements in forked
    children at the same index state."""
    row: dict = {"name": name, "P": n_base}
    cfg = HippoConfig(extractor="openie", show_progress=False, use_filter=False)
    row["config"] = {k: getattr(cfg, k) for k in ("ppr_dtype", "ppr_method", "ppr_tol", "ppr_block_size",
                                                  "query_batch_size", "synonymy_block_size")}
    docs = [(chunk_id(p), p) for p in corpus.passages]
    index = IndexState(work, cfg, lambda: LookupEncoder(corpus), "synthetic-lookup")
    log(f"{name}: indexing {n_base} passages")
    watch = Stopwatch()     # the stages of the change (IndexWriter laps each on it)
    t, _ = timed(IndexWriter(index, watch).add, dict(docs[:n_base]), corpus.triples)
    row["index_s"] = t
    row["index_stages"] = dict(watch.stages)
    row["index_no_embed_s"] = t - sum(v for k, v in watch.stages.items() if k.startswith("embed"))
    row["syn_build_s"] = watch.stages.get("synonymy")
    row["rss_after_index_gb"] = peak_rss_gb()
    g = index.graph
    row.update(g.stats())
    row["entities"] = len(index.stores["entity"])
    row["facts"] = len(index.stores["fact"])
    row["synonymy_entries"] = sum(len(v) for v in index.synonymy.values())

    log(f"{name}: graph build from scratch")
    pids = [p for p, _ in docs[:n_base]]
    row["graph_build_s"], _ = timed(build_graph, pids, index.passage_triples, index.synonymy)

    # --- retrieval (ours)
    log(f"{name}: retriever build")
    t, r = timed(build_retriever, cfg, index)
    row["retriever_build_s"] = t
    row["ppr_matrix_nnz"] = int(r.kernel.S.nnz)
    row["nodes"] = int(g.num_nodes)
    q = corpus.queries(n_queries)
    k = cfg.retrieval_top_k
    names = [f"q{i}" for i in range(n_queries)]
    r.search(names[:2], q[:2], q[:2], k)  # warm-up
    log(f"{name}: batched retrieval ({n_queries} queries)")
    t_b, (res_b, tim_b) = timed(r.search, names, q, q, k, repeat=2)
    row["retrieve_batched_ms"] = 1000 * t_b / n_queries
    for key in ("scoring", "seeding", "ppr"):
        row[f"{key}_batched_ms"] = 1000 * tim_b[key] / n_queries
    log(f"{name}: single-query retrieval")
    m = min(n_queries, ref_queries)
    tot = {"total": 0.0, "scoring": 0.0, "seeding": 0.0, "ppr": 0.0}
    same_rank = 0
    for i in range(m):
        t_s, (res_s, tim_s) = timed(r.search, [names[i]], q[i:i + 1], q[i:i + 1], k, repeat=2)
        tot["total"] += t_s
        for key in ("scoring", "seeding", "ppr"):
            tot[key] += tim_s[key]
        same_rank += int(np.array_equal(res_s[0].order, res_b[i].order)
                         and np.array_equal(res_s[0].scores, res_b[i].scores))
    row["retrieve_single_ms"] = 1000 * tot["total"] / m
    for key in ("scoring", "seeding", "ppr"):
        row[f"{key}_single_ms"] = 1000 * tot[key] / m
    row["single_equals_batched"] = f"{same_rank}/{m}"
    # PPR alone on the reset vectors of the first m queries
    cand, sc = r.top_facts(q[:m], cfg.linking_top_k)
    qq = np.repeat(np.arange(m), cand.shape[1] * 2)
    nodes = r.fact_nodes_of(cand.reshape(-1)).reshape(-1)
    ls = np.repeat(sc.reshape(-1), 2)
    ok = nodes >= 0
    R, _ = r.reset_matrix(qq[ok], nodes[ok], ls[ok], r.dense_scores(q[:m]), np.arange(m))
    kern = r.kernel
    t1 = 0.0
    for i in range(m):
        t, _ = timed(kern.run, R[:, i], cfg.damping, cfg.ppr_tol, cfg.ppr_max_iter, cfg.ppr_method, repeat=2)
        t1 += t
    row["ppr_single_ms"] = 1000 * t1 / m
    ours = kern.run(R, cfg.damping, cfg.ppr_tol, cfg.ppr_max_iter, cfg.ppr_method, cfg.ppr_block_size)
    row["ppr_iterations"] = sorted(set(kern.last_iterations))
    row["ppr_auto_block"] = kern.auto_block_size()
    for bs in (1, 4, 8, 16):
        if bs <= m:
            t, _ = timed(kern.run, R, cfg.damping, cfg.ppr_tol, cfg.ppr_max_iter, cfg.ppr_method, bs)
            row[f"ppr_block{bs}_ms"] = 1000 * t / m
    # issue's bandwidth bound: float64 CSR (8-byte values, 4-byte indices), 13 iterations, single query
    row["bound_bytes_per_iter"] = kern.S.nnz * 12 + g.num_nodes * 8 * 3
    row["rss_after_retrieval_gb"] = peak_rss_gb()

    # --- the reference at the same state, in a child process
    row.update(in_child(reference_retrieval, name, r, cfg, q, m, res_b, R, ours, index.stores["entity"].matrix,
                        knn_sample))
    del r, R, ours, res_b, res_s
    gc.collect()

    # --- inserts (ours)
    start = n_base
    for n_add in inserts:
        pct = round(100 * n_add / n_base)
        log(f"{name}: insert +{pct}% ({n_add} passages)")
        watch = Stopwatch()
        t, rep = timed(IndexWriter(index, watch).add, dict(docs[start:start + n_add]), corpus.triples)
        row[f"insert_{pct}pct_s"] = t
        row[f"insert_{pct}pct_stages"] = dict(watch.stages)
        row[f"insert_{pct}pct_no_embed_s"] = t - sum(v for kk, v in watch.stages.items() if kk.startswith("embed"))
        row[f"insert_{pct}pct_new_entities"] = rep.get("new_entities", 0)
        start += n_add
    # a query after the inserts (the retriever is rebuilt for the new graph version)
    if inserts:
        t, r2 = timed(build_retriever, cfg, index)
        row["retriever_rebuild_after_insert_s"] = t
        r2.search(names[:8], q[:8], q[:8], k)
        del r2
    row["peak_rss_gb"] = peak_rss_gb()   # ours: index + retrieval + inserts

    if inserts:
        row.update(in_child(reference_insert, name, index, cfg, [p for p, _ in docs[:start]], knn_sample))
    index.close()
    log(f"{name}: done, peak RSS (ours) {row['peak_rss_gb']:.2f} GB")
    return row


def build_retriever(cfg: HippoConfig, index: IndexState) -> Retriever:
    """Our retriever over the index's current graph and stores."""
    return Retriever.from_index(cfg, index)


def reference_retrieval(name: str, r: Retriever, cfg: HippoConfig, q: np.ndarray, m: int, res_b: list,
                        R: np.ndarray, ours: np.ndarray, entity_matrix: np.ndarray, knn_sample: int | None) -> dict:
    """The reference's retrieval at the state of our retriever ``r`` (run in a forked child): the
    first ``m`` queries one at a time through both reference paths, igraph PRPACK on our reset
    vectors ``R`` against our PPR scores ``ours``, float64 power iteration, all-vs-all synonymy kNN."""
    out: dict = {}
    log(f"{name}: reference retrieval ({m} queries, igraph PRPACK)")

    def time_queries(searcher) -> tuple[float, str]:
        """ms per query over the first m queries (after a warm-up), and how many of them
        have our batched top-10."""
        searcher.search(q[0])  # warm-up
        total, agree = 0.0, 0
        for i in range(m):
            t, order = timed(searcher.search, q[i])
            total += t
            agree += int(list(order[:10]) == list(res_b[i].order[:10]))
        return 1000 * total / m, f"{agree}/{m}"

    ref = ReferenceRetriever(r, cfg)
    with igraph_single_thread():
        out["ref_retrieve_ms"], out["top10_vs_reference_e2e"] = time_queries(ref)
        out["ref_loop_ms"], out["top10_vs_reference_loop"] = time_queries(HippoRAG2Loop(r, cfg))
        t_ig, exact = 0.0, []
        for i in range(m):
            t, x = timed(ref.ppr, R[:, i])
            t_ig += t
            exact.append(x)
    exact = np.column_stack(exact)
    out["igraph_ppr_ms"] = 1000 * t_ig / m
    pn = r.passage_nodes

    def agree(n: int) -> str:
        return f"{sum(list(top_k(ours[pn, i], n)) == list(top_k(exact[pn, i], n)) for i in range(m))}/{m}"

    out["top10_vs_igraph"] = agree(10)
    out["top200_vs_igraph"] = agree(200)
    out["ppr_l1_err_max"] = float(np.abs(ours - exact).sum(axis=0).max())
    k64 = PPRKernel.from_graph(r.graph, "float64")
    t, _ = timed(lambda: [k64.run(R[:, i], cfg.damping, cfg.ppr_tol, cfg.ppr_max_iter, "power") for i in range(m)])
    out["ppr_power_f64_single_ms"] = 1000 * t / m
    log(f"{name}: reference all-vs-all synonymy kNN")
    out["ref_knn_s"], out["ref_knn_note"] = _ref_knn_time(entity_matrix, cfg.synonymy_threshold, knn_sample, 5)
    out["bandwidth_gbs"] = memory_bandwidth_gbs()
    return out


def reference_insert(name: str, index: IndexState, cfg: HippoConfig, pids: list[str], knn_sample: int | None) -> dict:
    """What the reference redoes on every insert (run in a forked child): all-vs-all synonymy kNN
    over all entities and a graph rebuild over the passages ``pids``."""
    log(f"{name}: reference insert cost (all-vs-all kNN, graph rebuild)")
    t_knn, _ = _ref_knn_time(index.stores["entity"].matrix, cfg.synonymy_threshold, knn_sample, 6)
    t_gb, _ = timed(build_graph, pids, index.passage_triples, index.synonymy)
    return {"ref_insert_s": t_knn + t_gb}


def run_one(spec: str, n_queries: int, ref_queries: int) -> dict:
    """The row of one corpus: ``spec`` is a passage count or ``musique`` (the MuSiQue-shaped graph)."""
    with tempfile.TemporaryDirectory(prefix="hippo-bench-") as tmp:
        if spec == "musique":
            # the paper's MuSiQue graph: 11,656 passages, 85,288 entities, 140,830 fact edges,
            # 132,586 context edges, 1,125,951 synonymy edges
            c = SyntheticCorpus(11_656, seed=11, new_per_passage=8, old_per_passage=4, triples_per_passage=13,
                                dup_rate=0.0, cluster_share=0.62, cluster_size=22, sigma=0.42)
            row = bench_corpus("MuSiQue-shaped", c, 11_656, [], n_queries, ref_queries, None, Path(tmp))
        else:
            P = int(spec)
            c = SyntheticCorpus(P + P // 100 + P // 10, seed=0)
            row = bench_corpus(f"P={P:,}", c, P, [P // 100, P // 10], n_queries, ref_queries,
                               8192 if P >= 50_000 else None, Path(tmp))
    row["load_end"] = load_average(" ")
    return row

