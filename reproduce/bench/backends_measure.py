"""The measurements of ``python -m reproduce backends`` (:mod:`reproduce.bench.backends`): timings
under the load, retrieval timed per backend and its top-20 compared, and the PostgreSQL-only
figures (sizes in the database, HNSW against the exact scan, the engine's HNSW mode end to end)."""
from __future__ import annotations

import os
import time

import numpy as np

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


def same_rankings(tops: dict, sols: dict, ref: str, other: str) -> dict:
    """Questions whose top-20 passages and float scores (their bytes) are the same on ``other`` as
    on ``ref``: the retriever's arrays (``tops``: :func:`top_passages` per backend) and
    ``retrieve()``'s solutions (``sols``: ``(solutions, recall)`` per backend)."""
    return {"retriever_top20_ids_and_scores": sum(a == b for a, b in zip(tops[ref], tops[other], strict=True)),
            "retrieve_top20_docs_and_scores": sum(
                a.docs == b.docs and np.asarray(a.doc_scores).tobytes() == np.asarray(b.doc_scores).tobytes()
                for a, b in zip(sols[ref][0], sols[other][0], strict=True))}


def recall(rag, raw, gold) -> dict:
    """Passage Recall@1/2/5/10/20 (%) of raw retriever results."""
    from hippo_engine.evaluation.metrics import recall_at_k
    st = rag.index_state.stores["passage"]
    texts = [[st.text(p) for p in st.ids[x.order[:TOP]]] for x in raw]
    m = recall_at_k(texts, gold, (1, 2, 5, 10, 20))
    return {k: round(100 * v, 2) for k, v in m.items()}


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
