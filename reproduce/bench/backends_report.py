"""The README of ``python -m reproduce backends`` (:mod:`reproduce.bench.backends`): the figures
of one run (its ``musique.json``) as markdown tables, a column per backend measured; the HNSW
sections only where PostgreSQL was."""
from __future__ import annotations

from ..common import commit_label
from .servers import TITLES


def render(res: dict, command: str) -> str:
    """The README table."""
    commit = commit_label(" (tracked files modified)")
    backends = res.get("backends", ["sqlite", "postgres"])
    names = " vs ".join(TITLES[b] + (" + pgvector" if b == "postgres" else "") for b in backends)
    p = res["index"]["prime_sqlite_with_encoding"]
    n = res["same"]["questions"]
    L = [f"# Storage backends: {names}", "", f"    {command}", "",
         f"commit {commit}; load average (1/5/15 min) {res['load_start']} at the start, {res['load_end']} at the "
         "end (2 shared cores: a 1-minute load above ~1 means other processes took CPU from this run; the load "
         "before/after each figure is in musique.json).  ",
         f"Data: {res['data']['passages']} passages, {n} questions, `{res['data']['openie']}` (no LLM call), "
         f"filter off. Encoder: {res['encoder']}.", "",
         f"Vectors are computed once (a first SQLite index, {p['index_s']:.1f} s of which {p['embed_s']:.1f} s "
         f"embedding, load {p['loads'][0]} -> {p['loads'][1]}) and remembered; the timed indexes below reuse "
         "them, so their differences are the storage's. Retrieval: SQLite with its in-memory matrices, PostgreSQL "
         "with the lazy reader (`postgres_search=\"exact\"`: fact top-k and the normalisation by exact scans in the "
         "database, only passage vectors in memory), FalkorDB with the stores and graph loaded from the database "
         "into the engine's process at open (its PPR and scoring in process, as on SQLite).", ""]
    L += main_table(res, backends)
    L += same_lines(res, backends)
    if "postgres" in backends:
        L += postgres_lines(res)
    return "\n".join(L) + "\n"


def main_table(res: dict, backends: list[str]) -> list[str]:
    """The figures of every backend side by side."""
    ix, rt, d, o, mem = res["index"], res["retrieval"], res["disk"], res["open"], res.get("memory", {})
    mb = 1e6
    L = ["| figure | " + " | ".join(TITLES[b] + (" (embedded)" if b != "sqlite" else "") for b in backends) + " |",
         "|" + " --- |" * (len(backends) + 1)]

    def row(name, f):
        L.append(f"| {name} | " + " | ".join(f(b) for b in backends) + " |")
    row("create the index folder (server start; PostgreSQL: initdb)", lambda b: f"{ix[b]['construct_s']:.2f} s")
    row("index() with remembered vectors", lambda b: f"{ix[b]['index_s']:.1f} s (load {ix[b]['loads'][0]} -> "
        f"{ix[b]['loads'][1]})")
    row("of which embedding stages (memo look-ups)", lambda b: f"{ix[b]['embed_s']:.2f} s")
    row("retrieval per query, one batched call (best of passes)", lambda b: f"{rt[b]['batch_ms_best']:.2f} ms")
    row("retrieval per query, one call each: p50 / p95", lambda b: f"{rt[b]['single_p50_ms']:.2f} / "
        f"{rt[b]['single_p95_ms']:.2f} ms")
    row("Recall@2 / @5 / @20 (retrieve, no filter)", lambda b: " / ".join(
        f"{res['recall'][b][f'Recall@{x}']:.1f}" for x in (2, 5, 20)))
    row("disk: the index folder after close()", lambda b: f"{d['folders'][b] / mb:.1f} MB")
    row("server memory with the index open: RSS / Pss of its processes", lambda b: (
        f"{mem[b]['rss'] / mb:.0f} / {mem[b]['pss'] / mb:.0f} MB ({mem[b]['processes']} processes)" if b in mem
        else "in the engine's process"))
    row("second process: open (construct + stores + graph), each run", lambda b: ", ".join(
        failed(x) or f"{x['open_s']:.2f} s" for x in o[b]))
    row("second process: first query, model load excluded", lambda b: ", ".join(
        failed(x) or f"{x['first_query_s']:.2f} s" for x in o[b]))
    row("second process: model load / close()", lambda b: ", ".join(
        failed(x) or f"{x['model_load_s']:.1f} / {x['close_s']:.2f} s" for x in o[b]))
    errors = [f"{TITLES[b]}: {x['error']}" for b in backends for x in o[b] if "error" in x]
    return L + (["", "Second-process opens that failed: " + "; ".join(errors)] if errors else [])


def failed(x: dict) -> str:
    """``failed`` for a second-process open that failed (its error is listed under the table), else ''."""
    return "failed" if "error" in x else ""


def same_lines(res: dict, backends: list[str]) -> list[str]:
    """Rankings against SQLite's, the loads of the retrieval passes, sizes and memory in words."""
    same, rt, d, mem, n, mb = res["same"], res["retrieval"], res["disk"], res.get("memory", {}), \
        res["same"]["questions"], 1e6
    L = ["", "Same top-20 passages and float scores (bytes) as SQLite: " + "; ".join(
        f"{TITLES[b]} {same[b]['retriever_top20_ids_and_scores']}/{n} (Retriever.search arrays), "
        f"{same[b]['retrieve_top20_docs_and_scores']}/{n} (retrieve() solutions)" for b in backends if b != "sqlite")
        + ". Loads of the retrieval passes: " + ", ".join(f"{rt[b]['loads']} ({TITLES[b]})" for b in backends)
        + ".", ""]
    if "falkordb" in backends:
        f, m = d["falkordb_files"], mem["falkordb"]
        L += [f"FalkorDB: the server's own count of its data (`INFO memory` used_memory) "
              f"{m['used_memory'] / mb:.1f} MB with the index open (RSS {m['rss'] / mb:.1f} MB, load {m['load']}); "
              "on disk (append-only file, `appendfsync always`, no RDB snapshots): " + ", ".join(
                  f"{k} {v / mb:.1f} MB" for k, v in f.items()) + ".", ""]
    L.append("SQLite files: " + ", ".join(f"{k} {v / mb:.1f} MB" for k, v in d["sqlite_files"].items()) + ".")
    return L


def postgres_lines(res: dict) -> list[str]:
    """PostgreSQL's sizes, HNSW against the exact scan and the engine's HNSW mode end to end."""
    d, n, mb = res["disk"], res["same"]["questions"], 1e6
    pb, ph = d["postgres_before_hnsw"], d["postgres_with_hnsw"]
    L = ["", f"PostgreSQL sizes: database {pb['database'] / mb:.1f} MB, this index's tables and their indexes "
         f"{pb['schema'] / mb:.1f} MB before HNSW, {ph['schema'] / mb:.1f} MB with the HNSW indexes (fact "
         f"{ph['hnsw_fact'] / mb:.1f} MB, passage {ph['hnsw_passage'] / mb:.1f} MB); the folder also holds the "
         f"server's catalogs and its WAL ({d['postgres_wal'] / mb:.1f} MB).", "",
         "## HNSW against the exact scan (PostgreSQL, `nearest(k)` vs `nearest(k, exact=True)`)", "",
         "HNSW: m=16, ef_construction=64, ef_search = max(100, k) (the store's setting; pgvector's own default "
         "is 40), the ef_search candidates fetched and rescored exactly. Exact scan: every vector read from the "
         "database (binary COPY) per call. Retriever: the PostgreSQL retriever's exact top-k (lazy reader). One "
         "query per call; p50 over the questions (p95 in musique.json).", "",
         "| store | rows | build s | k | recall@k | min | queries with all k | HNSW p50 | exact scan p50 | "
         "retriever p50 | exact scan = retriever |", "|" + " --- |" * 11]
    for ns, h in res["hnsw"].items():
        for k, x in h["k"].items():
            L.append(f"| {ns} | {h['rows']} | {h['hnsw_build_s']:.1f} | {k} | {x['recall']:.4f} | "
                     f"{x['min_recall']:.2f} | {x['queries_all_found']} | {x['hnsw_p50_ms']:.2f} ms | "
                     f"{x['exact_p50_ms']:.2f} ms | "
                     f"{x['memory_p50_ms']:.2f} ms | {x['exact_scan_equals_memory']} |")
    e = res["end_to_end"]
    L += ["", "## End to end: the engine with `postgres_search=\"hnsw\"` against `\"exact\"`", "",
          "The lazy reader's HNSW mode: fact candidates from the HNSW index (ef_search 100) rescored exactly; the "
          "minimum of the min-max normalisation is the lowest exact score among HNSW candidates for the negated "
          "query. `exact` is the reference (equal to SQLite, above).", "",
          "| fact search | R@1 | R@2 | R@5 | R@10 | R@20 | same top-20 + scores | same top-20 ids "
          "| same top-5 ids | same candidate facts | batch of all, s | one call each: p50 / p95 ms |",
          "|" + " --- |" * 12]
    for mode, x in e.items():
        rc = " | ".join(f"{x['recall'][f'Recall@{k}']:.1f}" for k in (1, 2, 5, 10, 20))
        extra = (f"{x['same_top20_and_scores']}/{n} | {x['same_top20_ids']}/{n} | {x['same_top5_ids']}/{n} | "
                 f"{x['same_candidate_facts']}/{n} | {x['search_s']:.2f} | "
                 f"{x.get('single_p50_ms', float('nan')):.1f} / {x.get('single_p95_ms', float('nan')):.1f}"
                 if mode != "exact" else "(reference) | | | | | see above")
        L.append(f"| {mode} | {rc} | {extra} |")
    return L
