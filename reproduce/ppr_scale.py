"""Fast PPR at scale (issue 26, point 1): forward push (``retrieve/ppr/push.py``) against the exact
kernel (``retrieve/ppr/kernel.py``) on synthetic graphs with MuSiQue's ratios.

    python -m reproduce ppr-scale [--passages 100000 1000000] [--queries 200] [--exact-queries 200]
        [--r-max 1e-5 1e-6] [--head 100] [--refine 64 0] [--depth 2] [--out-dir DIR] [--name README]

Graph (arrays only, no index): per passage 8.6 entities and 9 facts (the ratios of the MuSiQue
subset as indexed by pg-scale: 16,228 entities and 17,033 facts over 1,890 passages); every
entity is the subject of a fact, objects are drawn from all entities; a fact edge (weight 1)
joins subject and object, context edges (weight 1) join a passage to the entities of its facts,
and each entity has one synonymy edge to a random entity (weight 0.8-1.0).

Queries, shaped like HippoRAG 2's reset: 5 random facts are the linked facts; their entities
are seeds with weight score / (passages of the entity); every passage gets
``0.05 x min-max(dense score)`` with synthetic dense scores (background N(0.15, 0.07), the
passages of the linked facts 0.5-0.7, 20 random passages 0.35-0.55).

Per size, in the same run: single-query latency p50/p95 of push (by parts, ``PushPPR.run_parts``,
per r_max and head; and on the whole reset vector, ``run_split``, as the retriever calls it) and
of exact PPR (the exact kernel on ``--exact-queries`` of the queries: seconds per query at 1M
passages), top-10 passage agreement on those queries (share with an identical top 10 in order,
as a set, and recall@10 of push against exact), push's work and bound, memory and the load.
"""
from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence

import numpy as np

from hippo_engine.retrieve.ppr.kernel import PPRKernel
from hippo_engine.retrieve.ppr.push import DEFAULT_DEPTH, DEFAULT_HEAD, DEFAULT_R_MAX, DEFAULT_REFINE, PushPPR

from .common import RESULTS_DIR, git_head, load_average, peak_rss_mb, rss_mb, write_result
from .ppr_scale_ann import index_prior

OUT_DIR = RESULTS_DIR / "ppr_scale"
ENTITIES_PER_PASSAGE = 8.6
FACTS_PER_PASSAGE = 9.0
DAMPING = 0.5
PASSAGE_WEIGHT = 0.05


def synthetic_graph(passages: int, seed: int = 0) -> dict:
    """Edge arrays of a graph with MuSiQue's ratios; entity nodes first, then passage nodes."""
    rng = np.random.default_rng(seed)
    ne, nf = round(ENTITIES_PER_PASSAGE * passages), round(FACTS_PER_PASSAGE * passages)
    subj = np.concatenate([rng.permutation(ne), rng.integers(0, ne, nf - ne)])[:nf]
    obj = rng.integers(0, ne, nf)
    obj = np.where(obj == subj, (obj + 1) % ne, obj)
    owner = ne + rng.integers(0, passages, nf)
    syn_dst = rng.integers(0, ne - 1, ne)
    syn_dst = syn_dst + (syn_dst >= np.arange(ne))
    ctx = np.unique(np.concatenate([owner * ne + subj, owner * ne + obj]))
    src = np.concatenate([subj, ctx // ne, np.arange(ne)])
    dst = np.concatenate([obj, ctx % ne, syn_dst])
    w = np.concatenate([np.ones(nf + len(ctx)), rng.uniform(0.8, 1.0, ne)])
    counts = np.bincount(ctx % ne, minlength=ne).astype(np.float64)   # passages per entity
    return {"n": ne + passages, "entities": ne, "passages": passages, "src": src, "dst": dst, "w": w,
            "subj": subj, "obj": obj, "owner": owner, "counts": counts,
            "edges": {"fact": nf, "context": len(ctx), "synonymy": ne}}


def query_resets(g: dict, queries: int, seed: int = 1):
    """Yield each query's reset vector (entity seeds + passage prior)."""
    rng = np.random.default_rng(seed)
    ne, npas = g["entities"], g["passages"]
    for _ in range(queries):
        facts = rng.integers(0, len(g["subj"]), 5)
        score = rng.uniform(0.5, 1.0, 5)
        r = np.zeros(g["n"])
        for ents in (g["subj"][facts], g["obj"][facts]):
            np.maximum.at(r, ents, score / np.maximum(g["counts"][ents], 1.0))
        dense = rng.normal(0.15, 0.07, npas)
        dense[g["owner"][facts] - ne] = rng.uniform(0.5, 0.7, 5)
        dense[rng.integers(0, npas, 20)] = rng.uniform(0.35, 0.55, 20)
        lo, hi = dense.min(), dense.max()
        r[ne:] += PASSAGE_WEIGHT * (dense - lo) / (hi - lo)
        yield r


def _pct(xs: list[tuple[float, float]]) -> dict:
    """p50/p95/mean of the wall times and p50/p95 of the CPU times (ms) of (wall, cpu) pairs."""
    a = np.asarray(xs).reshape(-1, 2) * 1000

    def q(col: int, pct: float) -> float:
        return round(float(np.percentile(a[:, col], pct)), 1)

    return {"p50_ms": q(0, 50), "p95_ms": q(0, 95), "mean_ms": round(float(a[:, 0].mean()), 1),
            "cpu_p50_ms": q(1, 50), "cpu_p95_ms": q(1, 95), "n": len(xs)}


class _Clock:
    """Wall and CPU time (this thread's) of a block: on a shared machine the CPU time is what the
    call costs on a core of its own, the wall time what it took beside the other processes."""

    def __enter__(self):
        self.t, self.c = time.perf_counter(), time.thread_time()
        return self

    def __exit__(self, *exc):
        self.took = (time.perf_counter() - self.t, time.thread_time() - self.c)


def top10(scores: np.ndarray, first_passage: int) -> np.ndarray:
    """The 10 best passages (by node number; ties by number, as a stable sort gives them)."""
    s = scores[first_passage:]
    return first_passage + np.argsort(-s, kind="stable")[:10]


def agreement(fast: list[np.ndarray], exact: list[np.ndarray]) -> dict:
    """Share of queries with the same top 10 (in order; as a set) and the mean recall@10."""
    pairs = list(zip(fast, exact, strict=True))
    return {"identical_top10_ordered": round(float(np.mean([np.array_equal(a, b) for a, b in pairs])), 3),
            "identical_top10_set": round(float(np.mean([set(a) == set(b) for a, b in pairs])), 3),
            "recall_at_10": round(float(np.mean([len(set(a) & set(b)) / 10 for a, b in pairs])), 4)}


def split_reset(r: np.ndarray, entities: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A query's parts as HippoRAG 2 builds them: entity seeds (nodes, weights) and the passage prior
    (entity nodes come first, then the passages)."""
    seed_idx = np.flatnonzero(r[:entities])
    return seed_idx, r[seed_idx], r[entities:]


def bench_size(passages: int, queries: int, exact_queries: int, r_maxes: Sequence[float], heads: Sequence[int],
               log=print, refines: Sequence[int] = (DEFAULT_REFINE,), depth: int = DEFAULT_DEPTH,
               index_head: int = 0) -> dict:
    """One graph size: build, then for every query push by parts (each variant) and on the whole reset
    (the first variant: the retriever's call), with ``index_head`` > 0 also with the prior from an index
    (the first variant; :mod:`.ppr_scale_ann`), and exact for the first ``exact_queries``."""
    t = time.perf_counter()
    g = synthetic_graph(passages)
    gen_s = time.perf_counter() - t
    t = time.perf_counter()
    kernel = PPRKernel(g["n"], g["src"], g["dst"], g["w"], "float32")
    build_s = time.perf_counter() - t
    pusher = PushPPR(kernel)
    ne = g["entities"]
    pnodes = np.arange(ne, g["n"])
    t = time.perf_counter()
    pusher.passage_ppr(pnodes, DAMPING)
    prior_s = time.perf_counter() - t
    log(f"{passages} passages: {g['n']} nodes, graph {gen_s:.1f}s, kernel {build_s:.1f}s, "
        f"all-passages PPR {prior_s:.1f}s (load {load_average()})")
    res: dict = {"passages": passages, "nodes": g["n"], "edges": g["edges"], "graph_s": round(gen_s, 1),
                 "kernel_s": round(build_s, 1), "prior_ppr_s": round(prior_s, 1),
                 "kernel_mib": round(kernel.nbytes / 2 ** 20, 1), "load_start": load_average(), "push": {}}
    for key in ("src", "dst", "w"):
        del g[key]
    variants = [(rm, h, rf) for rf in refines for rm in r_maxes for h in heads]

    def label(rm: float, h: int, rf: int) -> str:
        return f"r_max {rm:g}, head {h}, " + (f"refine {rf} x {depth} steps" if rf > 0 and depth > 0 else "no refine")

    names = [label(*v) for v in variants] + [label(*variants[0]) + ", whole reset"]
    if index_head > 0:
        names.append(label(*variants[0]) + f", prior from an index (head {index_head})")
    times: dict[str, list[tuple[float, float]]] = {k: [] for k in names}
    tops: dict[str, list[np.ndarray]] = {k: [] for k in names}
    work: dict[str, list] = {k: [] for k in names}
    exact_t: list[tuple[float, float]] = []
    exact_top: list[np.ndarray] = []
    for i, r in enumerate(query_resets(g, queries)):
        seed_idx, seed_val, prior = split_reset(r, ne)
        ann = index_prior(prior, PASSAGE_WEIGHT, index_head, 10) if index_head > 0 else None
        for name, (rm, h, rf) in zip(names, [*variants, *[variants[0]] * (len(names) - len(variants))], strict=True):
            if "from an index" in name and ann is None:
                raise RuntimeError(f"{passages} passages: too few for the prior from an index (head {index_head})")
            with _Clock() as clock:
                if name.endswith("whole reset"):
                    s, bound = pusher.run_split(r, pnodes, DAMPING, rm, h, rf, depth)
                elif "from an index" in name and ann is not None:
                    s, bound = pusher.run_parts(seed_idx, seed_val, ann.weights(len(pnodes)), pnodes, DAMPING, rm, h,
                                                rf, depth, exact_prior=ann)
                else:
                    s, bound = pusher.run_parts(seed_idx, seed_val, prior, pnodes, DAMPING, rm, h, rf, depth)
            times[name].append(clock.took)
            tops[name].append(ne + top10(s, 0))
            st = pusher.last_stats
            work[name].append((sum(x.pushes for x in st), sum(x.edges for x in st), bound,
                               pusher.last_candidate_bound))
        if i < exact_queries:
            with _Clock() as clock:
                x = kernel.run(r, DAMPING, 1e-6, 200, "chebyshev", None, 1)
            exact_t.append(clock.took)
            exact_top.append(top10(x, ne))
        if (i + 1) % 25 == 0:
            log(f"  {i + 1} queries (load {load_average()})")
    k = len(exact_top)
    for name in names:
        st = np.array(work[name])
        res["push"][name] = {**_pct(times[name]), **agreement(tops[name][:k], exact_top), "compared": k,
                             "mean_pushes": round(float(st[:, 0].mean())), "mean_edges": round(float(st[:, 1].mean())),
                             "node_bound": float(f"{st[:, 2].max():.3g}"),
                             "candidate_bound": float(f"{st[:, 3].max():.3g}")}
        if name.endswith("whole reset"):     # the whole reset gives the parts' answer (same parts, same pushes)
            res["push"][name]["same_as_parts"] = all(np.array_equal(a, b) for a, b in
                                                     zip(tops[name], tops[names[0]], strict=True))
        log(f"  {name}: {res['push'][name]}")
    res["exact"] = {**_pct(exact_t), "compared": k}
    res["load_end"] = load_average()
    res["rss_mib"] = round(rss_mb(), 1)
    res["peak_rss_mib"] = round(peak_rss_mb(), 1)
    log(f"  exact: {res['exact']}")
    return res


def render(results: list[dict], argv: Sequence[str]) -> str:
    """The markdown report."""
    head = git_head()
    argv = list(argv)[1:] if list(argv)[:1] == ["ppr-scale"] else list(argv)
    lines = ["# Fast PPR at scale: forward push vs exact PPR (issue 26, point 1)", "",
             f"Command: `python -m reproduce ppr-scale {' '.join(argv)}` at commit {head[0][:10] if head else '?'}"
             f"{' (dirty tree)' if head and head[1] else ''}; 2 shared CPU cores, load average (1/5/15 min) given "
             "per size. Exact: the engine's kernel (float32, Chebyshev, tol 1e-6, one query at a time, "
             "one thread). Push: `PushPPR.run_parts` (entity seeds and passage prior handed apart), and "
             "`PushPPR.run_split` on the whole reset vector (\"whole reset\": what `Retriever.run_ppr` calls), "
             "on the same operator, every query; the exact PPR of the all-passages reset (once per graph "
             "version) is timed apart (\"all-passages PPR s\"). Single-query latency of the PPR call alone, "
             "wall clock and this thread's CPU time (what the call costs on a core of its own; the wall time "
             "is what it took beside the other processes on the machine); agreement against exact on the "
             "first `compared` queries. \"prior from an index\" (`--index-head`): the prior built as the default "
             "path on PostgreSQL builds it from the passage index (its best and lowest passages exact, the "
             "mean-keeping fill elsewhere; `reproduce/ppr_scale_ann.py`), pushed with its corrections: the "
             "retriever's PPR part there.", "",
             "| passages | nodes | method | variant | p50 ms | p95 ms | CPU p50 ms | CPU p95 ms | queries "
             "| identical top-10 (ordered) | "
             "identical top-10 (set) | recall@10 | pushes | edges read | bound B, max over queries (×s(v)) "
             "| bound at the refined candidates |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        e = r["exact"]
        lines.append(f"| {r['passages']:,} | {r['nodes']:,} | exact | - | {e['p50_ms']} | {e['p95_ms']} "
                     f"| {e['cpu_p50_ms']} | {e['cpu_p95_ms']} | {e['n']} "
                     "| - | - | - | - | - | - | - |")
        for name, p in r["push"].items():
            lines.append(f"| {r['passages']:,} | {r['nodes']:,} | push | {name} | {p['p50_ms']} | {p['p95_ms']} "
                         f"| {p['cpu_p50_ms']} | {p['cpu_p95_ms']} | {p['n']} "
                         f"| {p['identical_top10_ordered']} ({p['compared']}) | {p['identical_top10_set']} "
                         f"| {p['recall_at_10']} | {p['mean_pushes']:,} | {p['mean_edges']:,} | {p['node_bound']:g} "
                         f"| {p['candidate_bound']:g} |")
    lines += ["", "Per size: graph and kernel build, the all-passages PPR, memory, load:", "",
              "| passages | edges (fact/context/synonymy) | graph s | kernel s | all-passages PPR s | kernel MiB "
              "| RSS MiB | peak RSS MiB | load start | load end |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        ed = r["edges"]
        lines.append(f"| {r['passages']:,} | {ed['fact']:,}/{ed['context']:,}/{ed['synonymy']:,} | {r['graph_s']} "
                     f"| {r['kernel_s']} | {r['prior_ppr_s']} | {r['kernel_mib']} | {r['rss_mib']} "
                     f"| {r['peak_rss_mib']} | {r['load_start']} | {r['load_end']} |")
    return "\n".join(lines) + "\n"


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The command's options."""
    ap.add_argument("--passages", type=int, nargs="+", default=[100_000, 1_000_000])
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--exact-queries", type=int, nargs="+", default=[200],
                    help="queries that also run exact PPR, per size (the last value repeats)")
    ap.add_argument("--r-max", type=float, nargs="+", default=[DEFAULT_R_MAX])
    ap.add_argument("--head", type=int, nargs="+", default=[DEFAULT_HEAD],
                    help="prior passages pushed (the rest settled with their two-step return)")
    ap.add_argument("--refine", type=int, nargs="+", default=[DEFAULT_REFINE],
                    help="candidate passages given the walk's next --depth steps (0: none)")
    ap.add_argument("--depth", type=int, default=DEFAULT_DEPTH)
    ap.add_argument("--index-head", type=int, default=0,
                    help="also push with the passage prior from an index, its N best and N lowest passages exact "
                         "(the default path on PostgreSQL: 400); 0: not run")
    ap.add_argument("--out-dir", default=str(OUT_DIR))
    ap.add_argument("--name", default="README")


def run(args: argparse.Namespace, argv: Sequence[str] = ()) -> int:
    """Run every size and write ``<out-dir>/<name>.md`` and ``.json``."""
    from pathlib import Path

    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    results = []
    for i, n in enumerate(args.passages):
        ex = args.exact_queries[min(i, len(args.exact_queries) - 1)]
        results.append(bench_size(n, args.queries, min(ex, args.queries), args.r_max, args.head,
                                  refines=args.refine, depth=args.depth, index_head=args.index_head))
        (out / f"{args.name}.json").write_text(json.dumps(results, indent=1))
        write_result(out / f"{args.name}.md", render(results, argv))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m reproduce.ppr_scale``."""
    import sys

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(ap)
    argv = list(sys.argv[1:] if argv is None else argv)
    return run(ap.parse_args(argv), argv)


if __name__ == "__main__":
    raise SystemExit(main())
