"""Benchmark suite: per-stage timings of hippo-engine against the reference approach, in one run.

    python -m reproduce.bench [--sizes 1000 10000 100000] [--queries 64] [--out reproduce/results/bench.md]

A seeded synthetic HippoRAG-shaped corpus (P passages, about 5P entities, 10 triples per passage,
some near-duplicate entity names that become synonymy edges; random unit vectors stand in for
embeddings, since encoding is not what is timed) is built at each size. Timed per stage:
graph build, synonymy kNN, fact scoring, seeding, PPR, end-to-end retrieval per query (single
and batched, excluding query encoding and the LLM filter), and inserting +1% / +10% passages
into an existing index (embedding excluded: vectors come from a lookup table). The reference
approach is timed beside ours in the same process: igraph PRPACK per query (what HippoRAG
calls) and all-vs-all synonymy on every insert. Ratios are what to read on a noisy machine.
"""
from __future__ import annotations

import argparse
import gc
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from hippo_engine.config import HippoConfig
from hippo_engine.embedding import Encoder
from hippo_engine.graph import build_graph
from hippo_engine.indexer import Index
from hippo_engine.retrieval import Retriever, top_k
from hippo_engine.synonymy import pairs_above, top_lists
from hippo_engine.text import fact_text, mdhash_id

DIM = 384


# ------------------------------------------------------------------ synthetic corpus
class SyntheticCorpus:
    """Seeded HippoRAG-shaped data: passages with triples over a Zipf-popular entity set."""

    def __init__(self, P: int, seed: int = 0, dim: int = DIM, dup_rate: float = 0.05):
        rng = np.random.default_rng(seed)
        self.P, self.dim = P, dim
        E = 5 * P
        self.names = [f"entity {i}" for i in range(E)]
        base = rng.standard_normal((E, dim)).astype(np.float32)
        # near-duplicates: a few entities are noisy copies of others (cosine ~0.9 -> synonymy)
        dups = rng.choice(E, int(E * dup_rate), replace=False)
        srcs = rng.integers(0, E, len(dups))
        base[dups] = base[srcs] + 0.45 * rng.standard_normal((len(dups), dim)).astype(np.float32)
        base /= np.linalg.norm(base, axis=1, keepdims=True)
        self.entity_vec = {self.names[i]: base[i] for i in range(E)}
        self.passages, self.triples = [], {}
        # each passage: 10 triples over ~6 entities drawn mostly uniformly, some popular hubs
        for p in range(P):
            local = rng.integers(0, E, 6)
            hubs = rng.zipf(1.5, 2) % E
            ents = np.concatenate([local, hubs])
            ts = []
            for t in range(10):
                a, b = rng.choice(len(ents), 2, replace=False)
                ts.append((self.names[ents[a]], f"rel {t % 7}", self.names[ents[b]]))
            text = f"passage {p}: " + "; ".join(" ".join(t) for t in ts)
            self.passages.append(text)
            self.triples[mdhash_id(text, "chunk-")] = ts
        self._rng = rng

    def vector_for(self, text: str) -> np.ndarray:
        """A stable vector per text (entities: their vector; others: seeded by the md5)."""
        v = self.entity_vec.get(text)
        if v is not None:
            return v
        r = np.random.default_rng(int(mdhash_id(text)[:12], 16))
        v = r.standard_normal(self.dim).astype(np.float32)
        return v / np.linalg.norm(v)

    def queries(self, n: int, seed: int = 1) -> np.ndarray:
        r = np.random.default_rng(seed)
        q = r.standard_normal((n, self.dim)).astype(np.float32)
        return q / np.linalg.norm(q, axis=1, keepdims=True)


class LookupEncoder(Encoder):
    """Returns the corpus's precomputed vectors: embedding cost is excluded from index timings."""

    def __init__(self, corpus: SyntheticCorpus):
        self.corpus, self.dim, self.name = corpus, corpus.dim, "synthetic-lookup"

    def encode(self, texts, *, instruction=None, show_progress=False, desc=""):
        if not len(texts):
            return np.zeros((0, self.dim), np.float32)
        return np.stack([self.corpus.vector_for(t) for t in texts])


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def timed(fn, repeat: int = 1):
    best, out = float("inf"), None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


# ------------------------------------------------------------------ one size
def bench_size(P: int, n_queries: int, ref_ppr_queries: int, with_insert: bool) -> dict:
    row: dict = {"P": P}
    corpus = SyntheticCorpus(P)
    cfg = HippoConfig(show_progress=False, use_filter=False)
    with tempfile.TemporaryDirectory() as tmp:
        index = Index(Path(tmp), cfg, lambda: LookupEncoder(corpus), "synthetic-lookup")
        docs = {mdhash_id(p, "chunk-"): p for p in corpus.passages}
        n0 = int(P / 1.1) if with_insert else P
        first = dict(list(docs.items())[:n0])
        t, _ = timed(lambda: index.add(first, corpus.triples))
        row["index_s"] = t
        row.update({f"stage_{k}": v for k, v in index.timings.items()})
        g = index.graph
        row.update(g.stats())
        # reference synonymy: all-vs-all kNN (what HippoRAG redoes on every insert)
        ents = index.stores["entity"]
        t_syn, _ = timed(lambda: pairs_above(ents.matrix, np.arange(len(ents)), cfg.synonymy_threshold,
                                             cfg.synonymy_block_size))
        row["synonymy_all_vs_all_s"] = t_syn
        t_gb, _ = timed(lambda: build_graph(list(first), index.passage_triples, index.synonymy))
        row["graph_build_s"] = t_gb

        st = index.stores
        r = Retriever(cfg, g, st["passage"].ids, st["passage"].matrix, st["fact"].ids, st["fact"].matrix,
                      st["entity"].ids, st["entity"].matrix, st["entity"].text, index.passage_triples)
        q = corpus.queries(n_queries)
        k = cfg.retrieval_top_k
        # batched end-to-end (scoring + seeding + PPR), per query
        t_b, (res_b, tim_b) = timed(lambda: r.search([f"q{i}" for i in range(n_queries)], q, q, k))
        row["retrieve_batched_ms_per_q"] = 1000 * t_b / n_queries
        row["scoring_ms_per_q"] = 1000 * tim_b["scoring"] / n_queries
        row["seeding_ms_per_q"] = 1000 * tim_b["seeding"] / n_queries
        row["ppr_batched_ms_per_q"] = 1000 * tim_b["ppr"] / n_queries
        # single-query path
        m = min(n_queries, 16)
        t_s = 0.0
        for i in range(m):
            ts, _ = timed(lambda: r.search([f"q{i}"], q[i:i + 1], q[i:i + 1], k))
            t_s += ts
        row["retrieve_single_ms_per_q"] = 1000 * t_s / m
        # reference PPR: igraph prpack per query, and agreement of the top-10 passages
        resets = []
        for i in range(ref_ppr_queries):
            dense = r.dense_scores(q[i:i + 1])[:, 0]
            linked = r.link_facts([int(x) for x in top_k(r.fact_scores(q[i:i + 1])[:, 0], cfg.linking_top_k)],
                                  r.fact_scores(q[i:i + 1])[:, 0])
            resets.append(r.reset_vector(linked, dense)[0])
        R = np.column_stack(resets)
        ig_graph = g.to_igraph()
        t_ig = 0.0
        agree = 0
        ours = r.run_ppr(R)
        for i in range(ref_ppr_queries):
            t0 = time.perf_counter()
            ref = np.array(ig_graph.personalized_pagerank(damping=cfg.damping, directed=False, weights="weight",
                                                          reset=R[:, i].tolist(), implementation="prpack"))
            t_ig += time.perf_counter() - t0
            ref_p = ref[r.passage_nodes]
            agree += int(list(top_k(ref_p, 10)) == list(top_k(ours[:, i], 10)))
        row["igraph_ppr_ms_per_q"] = 1000 * t_ig / ref_ppr_queries
        t_ours_single = 0.0
        for i in range(ref_ppr_queries):
            ts, _ = timed(lambda: r.run_ppr(R[:, i:i + 1]))
            t_ours_single += ts
        row["ppr_single_ms_per_q"] = 1000 * t_ours_single / ref_ppr_queries
        row["top10_agree"] = f"{agree}/{ref_ppr_queries}"
        # bandwidth bound for one PPR iteration sweep: CSR (data f64 + indices i32) + 2 vectors
        nnz = r.P.nnz
        bytes_per_iter = nnz * 12 + g.num_nodes * 8 * 3
        row["bytes_per_ppr_iter_mb"] = bytes_per_iter / 1e6
        row["reference_retrieve_ms_per_q"] = row["igraph_ppr_ms_per_q"] + row["scoring_ms_per_q"] + row["seeding_ms_per_q"]

        if with_insert:
            rest = list(docs.items())[n0:]
            plus1 = dict(rest[: max(1, P // 100)])
            t1, _ = timed(lambda: index.add(plus1, corpus.triples))
            row["insert_1pct_s"] = t1
            row["insert_1pct_stages"] = dict(index.timings)
            plus10 = dict(rest[max(1, P // 100):])
            t10, _ = timed(lambda: index.add(plus10, corpus.triples))
            row["insert_10pct_s"] = t10
            ents = index.stores["entity"]
            t_ref, _ = timed(lambda: pairs_above(ents.matrix, np.arange(len(ents)), cfg.synonymy_threshold,
                                                 cfg.synonymy_block_size))
            row["reference_insert_synonymy_s"] = t_ref
        index.close()
    row["peak_rss_mb"] = peak_rss_mb()
    return row


def memory_bandwidth_gbs() -> float:
    a = np.ones(64_000_000 // 8)
    t, _ = timed(lambda: a.sum(), repeat=5)
    return a.nbytes / t / 1e9


def render(rows: list[dict], cmd: str, bw: float) -> str:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    lines = [f"# hippo-engine benchmark", "", f"Command: `{cmd}`  ", f"Commit: {commit}; machine: {platform.machine()}, "
             f"{os.cpu_count()} cores; measured read bandwidth {bw:.1f} GB/s.", ""]
    keys = [("P", "passages"), ("entity_nodes", "entity nodes"), ("distinct_edges", "edges"),
            ("index_s", "index (s, no embedding)"), ("graph_build_s", "graph build (s)"),
            ("synonymy_all_vs_all_s", "synonymy all-vs-all (s)"),
            ("scoring_ms_per_q", "fact+passage scoring (ms/q, batched)"), ("seeding_ms_per_q", "seeding (ms/q)"),
            ("igraph_ppr_ms_per_q", "igraph PRPACK PPR (ms/q)"), ("ppr_single_ms_per_q", "our PPR single (ms/q)"),
            ("ppr_batched_ms_per_q", "our PPR batched (ms/q)"), ("top10_agree", "top-10 = igraph"),
            ("reference_retrieve_ms_per_q", "reference retrieve (ms/q)"),
            ("retrieve_single_ms_per_q", "our retrieve single (ms/q)"),
            ("retrieve_batched_ms_per_q", "our retrieve batched (ms/q)"),
            ("insert_1pct_s", "insert +1% (s)"), ("insert_10pct_s", "insert +10% (s)"),
            ("reference_insert_synonymy_s", "reference insert: all-vs-all synonymy (s)"),
            ("peak_rss_mb", "peak RSS (MB)")]
    lines.append("| metric | " + " | ".join(f"P={r['P']:,}" for r in rows) + " |")
    lines.append("| --- |" + " --- |" * len(rows))
    for k, label in keys[1:]:
        vals = []
        for r in rows:
            v = r.get(k, "")
            vals.append(f"{v:.3g}" if isinstance(v, float) else str(v))
        lines.append(f"| {label} | " + " | ".join(vals) + " |")
    lines.append("")
    lines.append("Ratios (reference / ours, same run):")
    lines.append("")
    for r in rows:
        parts = []
        if r.get("retrieve_single_ms_per_q"):
            parts.append(f"retrieve single {r['reference_retrieve_ms_per_q'] / r['retrieve_single_ms_per_q']:.1f}x")
            parts.append(f"batched {r['reference_retrieve_ms_per_q'] / r['retrieve_batched_ms_per_q']:.1f}x")
            parts.append(f"PPR single {r['igraph_ppr_ms_per_q'] / r['ppr_single_ms_per_q']:.1f}x")
        if r.get("insert_1pct_s"):
            parts.append(f"insert +1% costs {100 * r['insert_1pct_s'] / r['index_s']:.1f}% of the build")
        if bw and r.get("bytes_per_ppr_iter_mb"):
            bound_ms = r["bytes_per_ppr_iter_mb"] * 1e6 * 13 / (bw * 1e9) * 1000
            parts.append(f"bandwidth bound for 13 PPR iterations {bound_ms:.2f} ms; our single PPR is "
                         f"{r['ppr_single_ms_per_q'] / bound_ms:.1f}x of it")
        lines.append(f"- P={r['P']:,}: " + "; ".join(parts))
    return "\n".join(lines) + "\n"


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000])
    ap.add_argument("--queries", type=int, default=64)
    ap.add_argument("--ref-queries", type=int, default=16, help="queries timed with igraph PRPACK")
    ap.add_argument("--no-insert", action="store_true")
    ap.add_argument("--out", default="reproduce/results/bench.md")
    args = ap.parse_args(argv)
    bw = memory_bandwidth_gbs()
    rows = []
    for P in args.sizes:
        print(f"P={P} ...", flush=True)
        row = bench_size(P, args.queries, args.ref_queries, not args.no_insert)
        print({k: (round(v, 4) if isinstance(v, float) else v) for k, v in row.items()}, flush=True)
        rows.append(row)
        gc.collect()
    text = render(rows, "python -m reproduce.bench " + " ".join(sys.argv[1:] if argv is None else argv), bw)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
