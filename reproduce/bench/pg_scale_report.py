"""README of the PostgreSQL scale benchmark (:mod:`reproduce.bench.pg_scale`); its projection and
ranking agreement are in :mod:`reproduce.bench.pg_scale_projection` (re-exported here).

    python -m reproduce.bench.pg_scale_report [scale.json] [README.md]

:func:`render` writes the results as markdown: the command, the base the vectors derive from
and how it was made (``base``; results written before the benchmark built its own base only
have ``vectors_from``), each phase, and the ``notes`` list of the JSON (hand-written
findings) as a last section.
"""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path

from ..common import RESULTS_DIR
from .pg_scale_projection import (  # noqa: F401  (re-exported: the benchmark and tests import them from here)
    LIMIT_GIB,
    MIRRORED_LOADER,
    PARTS,
    SERVER_DISK_GIB,
    SERVER_RAM_GIB,
    add_projection,
    compare_rankings,
)


# ---------------------------------------------------------------------------- markdown
def _table(rows, head) -> list[str]:
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return out


def _render_query_process(res: dict) -> list[str]:
    qp = res.get("query_process")
    if not qp:
        return []
    lines = ["## The engine's query process (fresh processes)", "",
             "`HippoRAG(save_dir, storage=\"postgres\", dsn=..., postgres_schema=..., postgres_search=...)`, then "
             "`rag.retriever` (the passage matrix in its stored dtype, the graph from `graph.npz`, the PPR kernel; "
             "`memory`: every vector mirrored as float32, as the engine opened an index before the lazy reader), "
             "then queries one per `Retriever.search` call (top 10, no recognition filter; query vectors given, "
             "nothing encoded). `lazy` = `postgres_search=\"hnsw\"` (fact candidates from the HNSW index, rescored "
             "exactly), `exact` = the lazy reader with exact scans in the database; `exact-ppr` = `lazy` with "
             "`ppr_solver=\"exact\"` (the exact PPR kernel), the others keep the default `\"auto\"` (push = "
             "forward push, used from `ppr_push_min_nodes` graph nodes on); `lazy-scan` = `lazy` with "
             "`dense_prior=\"scan\"` (every passage scored for the prior; `lazy` takes it from the passage HNSW "
             "index when it pushes: prior = ann); `lazy-floor100` = `lazy` with `postgres_floor_ef_search=100` (the "
             "fact normalisation's minimum searched with the top search's `ef_search`; `lazy`: 20). RSS in MiB; "
             "peak = VmHWM; the PostgreSQL server's memory (shared_buffers, the connection's backend) is not "
             "counted.", ""]
    keys = (("postgres_search", "search"), ("ppr_solver", "PPR solver"), ("uses_push", "push"),
            ("dense_prior", "prior"), ("open_s", "open s"), ("retriever_s", "retriever s"),
            ("rss_after_import_mib", "RSS imports"), ("rss_after_open_mib", "RSS open"),
            ("rss_after_retriever_mib", "RSS retriever"), ("rss_after_queries_mib", "RSS after queries"),
            ("peak_rss_mib", "peak"), ("queries", "queries"), ("first_query_ms", "first query ms"),
            ("query_p50_ms", "p50 ms"), ("query_p95_ms", "p95 ms"), ("batch", "queries per call"),
            ("per_query_in_batches_ms", "ms a query in batches"), ("fallback_queries", "fallback"), ("load", "load"))
    ok = {m: r for m, r in qp.items() if "error" not in r and "skipped" not in r}
    if ok:
        lines += _table([(m, *("" if r.get(k) is None else r[k] for k, _ in keys)) for m, r in ok.items()],
                        ("mode", *(h for _, h in keys))) + [""]
        parts = sorted({k for r in ok.values() for k in r.get("query_parts_mean_ms", {})})
        lines += ["Mean time per query by part (ms):", ""]
        lines += _table([(m, *(r.get("query_parts_mean_ms", {}).get(k, "") for k in parts)) for m, r in ok.items()],
                        ("mode", *parts)) + [""]
        lines += ["What the retriever holds (MiB; object arrays with their elements, dicts estimated from a "
                  "sample):", ""]
        heads = [k for k in (*PARTS, "total") if any(k in r.get("retriever_memory_mib", {}) for r in ok.values())]
        rows = []
        for m, r in ok.items():
            mm = r.get("retriever_memory_mib", {})
            other = ", ".join(f"{k} {v}" for k, v in mm.get("other", {}).items()) or "-"
            rows.append((m, *(mm.get(k, "") for k in heads), other))
        lines += _table(rows, ("mode", *heads, "other attributes")) + [""]
    for m, r in ok.items():
        if r.get("graph_loaded") is False:
            log = "; ".join(r.get("engine_log", []))[:800]
            lines += [f"**`{m}` rebuilt the graph** instead of loading `graph.npz`: {log}", ""]
    for m, r in qp.items():
        if "skipped" in r:
            lines += [f"`{m}` not run: {r['skipped']}.", ""]
        if "error" in r:
            lines += [f"`{m}` failed:", "", "```", r["error"].strip()[-1500:], "```", ""]
    agree = res.get("ranking_agreement")
    if agree:
        lines += ["Agreement of the rankings (the first queries, common to both): top-10 passage overlap, recall@10 "
                  "of the first's top 10 against the second's (the reference), queries whose top 10 (in order) and "
                  "whose candidate facts (top 5, in order; as a set) are identical.", ""]
        lines += _table([(pair, a.get("queries"), a.get("top10_overlap_mean"), a.get("top10_overlap_min"),
                          a.get("recall_at_10", ""), a.get("top10_identical"), a.get("candidate_facts_identical"),
                          a.get("candidate_facts_same_set")) for pair, a in agree.items()],
                        ("pair", "queries", "overlap mean", "overlap min", "recall@10", "top 10 identical",
                         "facts identical", "facts same set")) + [""]
    return lines


def _verdict(res: dict) -> list[str]:
    p = res.get("projection", {})
    lazy = res.get("query_process", {}).get("engine-lazy", {})
    if "lazy_peak_under_8gib_measured" not in p:
        return []
    yes = {True: "stays under", False: "does NOT stay under"}
    under = {True: "also under", False: "over"}
    return [f"**Query process (engine-lazy) under {LIMIT_GIB:g} GiB:** at the measured size (peak "
            f"{lazy['peak_rss_mib']} MiB) it {yes[p['lazy_peak_under_8gib_measured']]} {LIMIT_GIB:g} GiB; at "
            f"{p['passages']:,} passages (projection) it {yes[p['lazy_peak_under_8gib_projected']]} "
            f"{LIMIT_GIB:g} GiB: about {p['lazy_rss_gib']} GiB resident after queries with the measured parts "
            f"scaled, peak about {p['lazy_peak_gib']} GiB (the transient above the steady state scaled too). "
            f"Pessimistic bound, everything above the imported libraries growing with the rows: "
            f"{p['lazy_rss_bound_gib']} GiB resident, peak {p['lazy_peak_bound_gib']} GiB "
            f"({under[p['lazy_peak_bound_under_8gib']]} {LIMIT_GIB:g} GiB; from a small run this bound is "
            "dominated by fixed costs multiplied by the factor).", ""]


def _fits(need: float, have: float) -> str:
    return "fits" if need <= have else "does NOT fit"


def _placement(p: dict) -> list[str]:
    """Where each part lives at the projected size: what one database server (``SERVER_RAM_GIB``,
    ``SERVER_DISK_GIB``) holds, what needs more, and the graph (in the query process)."""
    if "disk_total_gib" not in p or "lazy_rss_gib" not in p:
        return []
    n, hnsw, disk = f"{p['passages']:,}", p["hnsw_gib"], p["disk_total_gib"]
    builds = sum(v for k, v in p.items() if k.startswith("hnsw_build_"))
    scan = max((v for k, v in p.items() if k.startswith("exact_pg_scan_")), default=0)
    graph = sum(p.get(f"lazy_{k}_gib", 0.0) for k in ("node_ids", "graph_arrays", "graph_other", "ppr_kernel"))
    lines = [f"### Where it lives at {n} passages", "",
             f"Reference database server: {SERVER_RAM_GIB:g} GiB of RAM, {SERVER_DISK_GIB:g} GiB of disk.", "",
             f"- **Database (one server):** {disk} GiB on disk (tables {p['tables_without_hnsw_gib']} GiB, HNSW "
             f"indexes {hnsw} GiB, WAL up to {p['wal_gib_max']} GiB): {_fits(disk, SERVER_DISK_GIB)} on its disk. "
             f"HNSW queries stay at the measured milliseconds while the HNSW indexes stay in memory "
             f"(shared_buffers and the page cache): {hnsw} GiB {_fits(hnsw, SERVER_RAM_GIB * 0.75)} in three "
             f"quarters of its RAM" + ("." if hnsw <= SERVER_RAM_GIB * 0.75 else
                                        f": that needs a server with about {math.ceil(hnsw / 0.75)} GiB of RAM, "
                                        "else HNSW searches read pages from disk and slow down (the engine uses "
                                        "one database; splitting the stores across servers it does not do).")
             + f" Building them: about {builds:.0f} min with the leader and one parallel worker (projected N log N "
             "from builds whose graph fit in maintenance_work_mem; a build whose graph outgrows it, as the largest "
             "index's does here unless the server has that much memory to give it, is much slower). "
             f"Exact scans without the index: about {scan / 1e3:.1f} s a query, so `postgres_search=\"exact\"` is "
             "for checking only at this size.",
             f"- **The graph lives in the query process:** `graph.npz` (about "
             f"{p.get('graph_file_gib', '?')} GiB) beside the index (the engine's writer also keeps a copy in the "
             "database's `graph_file` table for readers on other hosts: that much more on its disk, not in the "
             "figures above, which this loader did not write), read whole by each query process, with the "
             f"passage matrix and the fact ids: about {p['lazy_rss_gib']} GiB resident per query process (graph "
             f"arrays, node ids and PPR kernel {graph:.1f} GiB), peak about {p['lazy_peak_gib']} GiB. "
             + ("That fits a query host of 8 GiB." if p["lazy_peak_gib"] < LIMIT_GIB else
                f"That needs more than an 8 GiB query host: a host with about {math.ceil(p['lazy_peak_gib'] * 1.25)} "
                "GiB per query process (each process holds its own copy), or the graph split across hosts, which "
                "the engine does not do.")]
    if "exact_ppr_query_p50_ms" in p:
        lines.append(f"- **PPR:** with exact PPR about {p['exact_ppr_query_p50_ms'] / 1e3:.1f} s a query (measured "
                     f"p50 {p['exact_ppr_query_p50_ms_measured']} ms, of which PPR "
                     f"{p.get('exact_ppr_part_mean_ms_measured', '?')} ms on average, scaled with the edges); the "
                     f"fast path (forward push, measured p50 {p.get('fast_ppr_query_p50_ms_measured')} ms a whole "
                     f"query, of which PPR {p.get('fast_ppr_part_mean_ms_measured', '?')} ms) touches the nodes near "
                     "the seeds, so its PPR part grows with the local density, not with the graph (not "
                     "extrapolated); the rest of the query (`scoring`: the fact search and the dense score of every "
                     "passage) grows with the rows.")
    if "memory_peak_gib" in p:
        lines.append(f"- **`postgres_search=\"memory\"`** (every vector mirrored): about {p['memory_peak_gib']} GiB "
                     "per query process, which only a large host holds.")
    return lines + [""]


def _command(res: dict) -> str:
    """The command that wrote ``res`` (rebuilt from its arguments for results that lack it)."""
    if res.get("command"):
        return res["command"]
    a = res["args"]
    base = (" --mixture" if a.get("mixture") else
            " --base-index " + " ".join(a["base_index"]) if a.get("base_index") else "")
    return ("python -m reproduce pg-scale --passages {} --entities-per-passage {} --facts-per-passage {} --dim {} "
            "--seed {} --queries {} --exact-queries {}{}{}").format(
                a["passages"], a["entities_per_passage"], a["facts_per_passage"], a["dim"], a["seed"],
                a.get("queries"), a.get("exact_queries"), " --skip-memory-probe" if a.get("skip_memory_probe") else "",
                base)


def _base(res: dict) -> str:
    """How the base the vectors derive from was made, in words."""
    b = res.get("base")
    rebuild = ("`python -m reproduce pg-scale --work DIR` indexes the MuSiQue subset into `DIR/base` and derives the "
               "vectors from it (reused by later runs with the same `--work`)")
    if b is None:
        return (f"Base: {res['vectors_from']}: SQLite indexes made outside the benchmark and read as files (a run "
                f"without `--base-index` now makes its own base: {rebuild}).")
    if b["kind"] == "mixture":
        return ("Base: none: a gaussian mixture on the sphere (`--mixture`, meant for tests); the figures do not "
                "reflect real embeddings.")
    models = ", ".join(b.get("models") or []) or "unnamed"
    if b["kind"] == "given":
        return (f"Base: the SQLite index(es) given with `--base-index`: {', '.join(f'`{p}`' for p in b['paths'])} "
                f"(embedding model {models}). Without `--base-index`, {rebuild}.")
    made = "built by this run" if b["kind"] == "built" else f"built by an earlier run ({b.get('made')}) and reused"
    return (f"Base: the MuSiQue subset `{b['dataset']}` ({b['passages']:,} of its {b['corpus_passages']:,} passages, "
            f"its released OpenIE file `{b['openie']}`) indexed by the benchmark with the engine's default encoder "
            f"({models}) into `<work>/base/index.sqlite` (SQLite backend, recognition filter off, OpenIE imported: "
            f"no LLM call; {b['index_s']} s, {made}); rows {b['rows']}. `--base-index FILE ...` uses existing "
            "indexes instead.")


def _writer_rows(label: str, rec: dict) -> list[tuple]:
    rows = []
    for action in ("add", "remove"):
        d = rec.get(action) or {}
        idx = d.get("rows_before") or {}
        size = f"{idx.get('passage', 0):,} / {idx.get('entity', 0):,} / {idx.get('fact', 0):,}"
        if "error" in d or not d:
            rows.append((label, size, action, "error: " + str(d.get("error", "missing"))[-200:], "", "", "", "", "",
                         "", ""))
            continue
        t = {k: v for k, v in d.get("timings_s", {}).items() if k != "total"}
        slow = ", ".join(f"{k} {v}" for k, v in sorted(t.items(), key=lambda kv: -kv[1])[:3])
        rows.append((label, size, f"{action} {rec.get('passages')}", d.get("rss_after_import_mib"),
                     d.get("rss_after_change_mib"), d.get("peak_rss_mib"), f"**{d.get('peak_above_import_mib')}**",
                     d.get("change_s"), slow, "yes" if d.get("content_loaded") else "no", d.get("load")))
    return rows


def _render_writer(res: dict) -> list[str]:
    """The writer's peak memory for one change (``writer``: this run's; ``writer_runs``: runs of
    ``pg_scale_writer`` on indexes of other sizes and with other versions of the engine)."""
    recs = ([("this run", res["writer"])] if res.get("writer") else []) + \
        [(r.get("label", "?"), r) for r in res.get("writer_runs", [])]
    if not recs:
        return []
    n = recs[0][1].get("passages", 200)
    lines = [f"## The engine's writer: one change of {n} passages", "",
             "An engine writer in a fresh process (`python -m reproduce.bench.pg_scale_writer`): `HippoRAG(storage="
             "\"postgres\", postgres_search=\"hnsw\" or \"exact\")` (the writer is the same: its stores hold no "
             f"vector), then one `IndexWriter.index` of {n} new passages with their document rows and 9 "
             "triples each (9 new entities a passage, objects drawn from the index's entities, so the graph and "
             "synonymy lists change), then, in another fresh process, `IndexWriter.delete` of those documents. "
             "Vectors from a hash of each text (no model loaded: the figures are the writer's own; the issue's "
             "bound is 1 GB plus the encoder). RSS in MiB; peak = VmHWM; \"above imports\" = peak minus RSS "
             "after the imports (Python, numpy, psycopg). \"Facts read\": whether the writer read every fact and "
             "synonymy list into memory. Index size = passages / entities / facts before the change.", ""]
    rows = [row for label, rec in recs for row in _writer_rows(label, rec)]
    lines += _table(rows, ("measured", "index size", "change", "RSS imports", "RSS after", "peak",
                           "peak above imports", "change s", "slowest stages (s)", "facts read", "load"))
    cmds = [r["command"] for _, r in recs if r.get("command")]
    built = list(dict.fromkeys(r["built_with"] for _, r in recs if r.get("built_with")))
    if built:
        lines += ["", "Indexes measured (synthetic, the shapes above; `--mixture`: the vectors do not matter to the "
                  "writer's memory):", ""] + [f"- `{c}`" for c in built]
    if cmds:
        lines += ["", "Commands (`--engine DIR`: a `git archive` of that commit's `hippo_engine`):", ""]
        lines += [f"- `{c}`" for c in cmds]
    return lines + [""] + _render_writer_equal(res)


def _render_writer_equal(res: dict) -> list[str]:
    """Whether the writers of two engine versions leave equal indexes (``writer_equal``)."""
    eq = res.get("writer_equal")
    if not eq:
        return []
    lines = ["### The same index through either writer (MuSiQue subset)", "",
             "`python -m reproduce.bench.pg_scale_equal` (see its documentation): each engine, in a fresh process, "
             "indexes the MuSiQue subset into its own PostgreSQL schema (`postgres_search=\"exact\"`, the "
             "`rankings` command's openie settings, released OpenIE imported, no LLM call): the first 1,200 "
             "documents, then (reopened) documents 1,000 on, then deletes documents 300-499 (state 0), then indexes "
             "them again (state 1: the whole corpus, whose rankings hash is the published one when the index "
             "equals a one-shot build). Digests (SHA-256) of each part of the snapshot: stores (ids, texts, "
             "vectors), graph nodes and edges (weights exact), synonymy lists, documents.", "",
             f"Command: `{eq['command']}`; load {round(eq['load'], 2)}.", ""]
    keys = ("passage", "entity", "fact", "graph_nodes", "graph_edges", "synonymy", "documents", "rankings_hash")
    rows = []
    for r in eq["runs"]:
        for i, st in enumerate(r.get("states", [])):
            rows.append((r.get("label", r.get("engine")), i, st.get("passages"), *[st.get(k, "") for k in keys]))
    lines += _table(rows, ("engine", "state", "passages", *keys))
    verdict = [f"{c.get('label', c.get('engine'))}: " + ("equal" if c["equal"] else "DIFFERENT " + str(c["states"]))
               for c in eq["comparison"]]
    return lines + ["", "Compared with the first engine: " + "; ".join(verdict) + ".", ""]


def render(res: dict) -> str:
    """The results as markdown."""
    a = res["args"]
    lines = [f"# PostgreSQL + pgvector at scale: {a['passages']:,} passages", "",
             f"Command: `{_command(res)}` (or `python -m reproduce.bench.pg_scale` with the same arguments).", "",
             _base(res), "",
             f"Vectors: synthetic, derived from the base's vectors (distinct base rows {res['base_rows']}); "
             "halfvec (float16) columns. Content consistent the way the engine builds an OpenIE index (entity "
             "phrases, triples and their fact ids, passage ids from the texts; the vector of a row does not "
             "depend on its text). Server settings: " + ", ".join(f"{k}={v}" for k, v in res["settings"].items())
             + f". {res['cpus']} shared CPU cores; the load average (1 min) is given with every timing.", ""]
    if "load" in res:
        ld = res["load"]
        lines += ["## Index time", "", f"Rows: {ld['rows']} = **{ld['vectors']:,} vectors**, {ld['triples']:,} "
                  f"triples, {ld['synonymy']:,} synonymy rows, in {len(ld['batches'])} write transactions. "
                  f"Database time {ld['db_s']} s ({ld['vectors_per_s']:,} vectors/s), wall {ld['wall_s']} s "
                  f"(with data generation), VACUUM ANALYZE {ld['vacuum_analyze_s']} s; loader peak RSS "
                  f"{ld['loader_peak_rss_mib']} MiB ({ld.get('loader_stores', MIRRORED_LOADER)}; it keeps the "
                  f"triples and synonymy lists for the graph). Load avg at the end {ld['load_avg']}.", ""]
    if "graph" in res:
        g = res["graph"]
        lines += ["## Graph (`build_graph`, `content_digest`, `GraphData.save`)", "",
                  f"Built in {g['build_s']} s, digest {g['digest_s']} s, meta and `graph.npz` ({g['file_mib']} MiB) "
                  f"{g['meta_and_save_s']} s, PPR kernel {g['kernel_s']} s; loader RSS {g['rss_before_mib']} -> "
                  f"{g['rss_with_graph_mib']} MiB with the graph, loader peak {g['loader_peak_rss_mib']} MiB. "
                  f"Load {g['load']}.", ""]
        lines += _table([(k, f"{v:,}" if isinstance(v, int) else v) for k, v in g["stats"].items()], ("graph", "value"))
        lines += ["", "Memory (MiB):", ""] + _table(list(g["memory_mib"].items()), ("part", "MiB")) + [""]
    if "neighbour_profile" in res:
        rows = [(s, k, v["n1"], v["n10"], v["n100"], v["gap10_11"])
                for s, d in res["neighbour_profile"].items() for k, v in d.items()]
        lines += ["Neighbour scores of the queries (mean #1, #10, #100, gap #10-#11): the synthetic table vs the "
                  "real vectors the rows derive from (synthetic: a sample of up to 200k rows of the table; queries: "
                  "perturbed real vectors, as in the query benchmark):", ""]
        lines += _table(rows, ("store", "vectors", "#1", "#10", "#100", "gap")) + [""]
    if "hnsw_build" in res:
        rows = [(s, b["rows"], b["s"], b["load"]) for s, b in res["hnsw_build"].items()]
        lines += ["## HNSW build (`ensure_hnsw`: m=16, ef_construction=64, halfvec_ip_ops)", ""]
        lines += _table(rows, ("store", "rows", "seconds", "load")) + [""]
    if "queries" in res:
        rows = [(s, q["rows"], q["queries"], q["recall_at_10"], q["top10_identical"], q["hnsw_p50_ms"],
                 q["hnsw_p95_ms"], f"{q['exact_pg_scan_p50_ms']} / {q['exact_pg_scan_p95_ms']}",
                 q["exact_engine_scan_p50_ms"], q["load"]) for s, q in res["queries"].items()]
        lines += ["## Store queries: HNSW vs exact (top 10)", "",
                  "HNSW = the store's `nearest(q, 10)` (ef_search 100, candidates rescored in numpy); truth = "
                  "`nearest(q, 10, exact=True)`. Exact PG = PostgreSQL's `ORDER BY vec <#> q LIMIT 10` with index "
                  "scans off; exact engine = `nearest(exact=True)` for one query (every vector read by COPY).", ""]
        lines += _table(rows, ("store", "rows", "queries", "recall@10", "top-10 identical", "HNSW p50 ms",
                               "HNSW p95 ms", "exact PG p50 / p95 ms", "exact engine p50 ms", "load")) + [""]
    if "disk" in res:
        d = res["disk"]
        rows = [(t, m) for t, m in d["tables_mib"].items()] + [(f"(of which {i})", m) for i, m in d["hnsw_mib"].items()]
        lines += ["## Disk (MiB)", ""] + _table(rows, ("table (with indexes)", "MiB")) + [
            "", f"Tables total {d['tables_total_mib']} MiB; database {d['database_mib']} MiB; data folder "
            f"{d['data_dir_mib']} MiB, of which WAL {d['wal_mib']} MiB.", ""]
    lines += _render_query_process(res)
    lines += _render_writer(res)
    if "projection" in res:
        p = res["projection"]
        lines += [f"## Projection to {p['passages']:,} passages (extrapolated, not measured; {p['basis']})", ""]
        lines += _table(sorted((k, v) for k, v in p.items() if k not in ("passages", "basis")), ("item", "value"))
        lines += ["", "Linear in the rows, except HNSW builds (N log N); HNSW latency is the measured one "
                  "(it grows about with log N, and with cache misses once the index outgrows shared_buffers and "
                  "the page cache). WAL is bounded by max_wal_size (2GB here). Query process (`lazy_*`): each part "
                  "of the retriever measured in the engine-lazy process (passage matrix, fact ids, node ids, graph "
                  "arrays, PPR kernel, other attributes) scaled with the rows, added to its resident memory after "
                  "the queries (`lazy_rss_gib`); the bounds scale everything above the imported libraries.", ""]
        lines += _verdict(res)
        lines += _placement(p)
    if res.get("notes"):
        lines += ["## Findings", ""] + [f"- {n}" for n in res["notes"]] + [""]
    return "\n".join(lines)


def main(argv=None) -> int:
    """Write the README from the JSON."""
    argv = sys.argv[1:] if argv is None else argv
    src = Path(argv[0]) if argv else RESULTS_DIR / "pg_scale" / "scale.json"
    dst = Path(argv[1]) if len(argv) > 1 else src.with_name("README.md")
    res = json.loads(src.read_text())
    add_projection(res, res.get("projection", {}).get("passages", 1_000_000))
    src.write_text(json.dumps(res, indent=1) + "\n")
    dst.write_text(render(res) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
