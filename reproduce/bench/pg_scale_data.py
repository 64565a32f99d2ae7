"""The synthetic index of the PostgreSQL scale benchmark (:mod:`reproduce.bench.pg_scale`, steps 1
and 2 of its documentation): vectors around the base's real ones, each batch's rows consistent the
way the engine writes an index, and their load into the database in one transaction per batch."""
from __future__ import annotations

import math
import time

import numpy as np

from .pg_scale_base import unit
from .pg_scale_probe import STORES, load1, peak_mib

QUERY_STORES = ("fact", "passage")
PREDICATE = "related to"
PROFILE_ROWS = 200_000


# ---------------------------------------------------------------------------- synthetic vectors
def synth(rng, base: np.ndarray, n: int) -> np.ndarray:
    """``n`` unit vectors around the real ``base`` rows (see the module documentation)."""
    m, dim = base.shape
    i, j = rng.integers(0, m, n), rng.integers(0, m, n)
    lam = rng.uniform(0.0, 0.5, (n, 1)).astype(np.float32)
    sig = rng.uniform(0.4, 0.8, (n, 1)).astype(np.float32)
    g = rng.standard_normal((n, dim), dtype=np.float32) / np.float32(math.sqrt(dim))
    return unit(base[i] + lam * base[j] + sig * g)


def profile(store_vecs: np.ndarray, queries: np.ndarray) -> dict:
    """Mean neighbour scores #1, #10, #100 and the #10-#11 gap of ``queries`` in a sample."""
    s = -np.sort(-(queries @ store_vecs.T), axis=1)[:, :101]

    def col(i: int):
        return round(float(s[:, i].mean()), 3) if s.shape[1] > i else None
    gap = round(float((s[:, 9] - s[:, 10]).mean()), 4) if s.shape[1] > 10 else None
    return {"n1": col(0), "n10": col(9), "n100": col(99), "gap10_11": gap}


# ---------------------------------------------------------------------------- consistent content
def fact_endpoints(rng, e0: int, nb: int, nf: int) -> tuple[np.ndarray, np.ndarray]:
    """Subject and object entity numbers of ``nf`` distinct facts of a batch whose new entities
    are ``e0 .. e0+nb-1``: every new entity is a subject (or, with fewer facts than entities, an
    object), the other objects are drawn from all ``e0+nb`` entities; no self-loop, no pair
    twice (subjects are new, so no pair of an earlier batch either)."""
    if 2 * nf < nb:
        raise ValueError(f"{nf} facts cannot link {nb} new entities: raise --facts-per-passage")
    perm = e0 + rng.permutation(nb)
    subj = perm[np.arange(nf) % nb] if nb else rng.integers(0, max(e0, 1), nf)
    obj = rng.integers(0, e0 + nb, nf)
    fixed = np.zeros(nf, bool)
    if nb > nf:                               # the entities left over are objects
        obj[:nb - nf] = perm[nf:]
        fixed[:nb - nf] = True
    total = np.int64(e0 + nb)
    for _ in range(1000):
        key = subj.astype(np.int64) * total + obj
        first = np.zeros(nf, bool)
        first[np.unique(key, return_index=True)[1]] = True
        bad = ((subj == obj) | ~first) & ~fixed
        if not bad.any():
            return subj, obj
        obj[bad] = rng.integers(0, e0 + nb, int(bad.sum()))
    raise RuntimeError("could not draw distinct facts")  # pragma: no cover


def batch_content(rng, bases: dict, first: dict, counts: dict, phrases: list[str], entity_ids: list[str]
                  ) -> dict:
    """One batch's rows, consistent the way the engine writes an index: ``first`` and
    ``counts`` give the number of the batch's first row and its row count per store;
    ``phrases``/``entity_ids`` (every entity so far) are extended with the new entities."""
    from hippo_engine.ids import chunk_id, entity_id, fact_id, fact_text
    e0, nb, nf, npas = first["entity"], counts["entity"], counts["fact"], counts["passage"]
    new_phrases = [f"entity {n}" for n in range(e0, e0 + nb)]
    new_eids = [entity_id(p) for p in new_phrases]
    phrases.extend(new_phrases)
    entity_ids.extend(new_eids)
    subj, obj = fact_endpoints(rng, e0, nb, nf)
    owner = rng.integers(0, npas, nf)
    order = np.argsort(owner, kind="stable")           # a passage's triples in fact order
    triples = [(phrases[s], PREDICATE, phrases[o]) for s, o in zip(subj[order].tolist(), obj[order].tolist(),
                                                                    strict=True)]
    owner = owner[order]
    ftexts = [fact_text(t) for t in triples]
    fids = [fact_id(t) for t in ftexts]
    ptxt_base = bases["passage"][1]
    ptexts = [f"passage {first['passage'] + i}: {ptxt_base[k]}"
              for i, k in enumerate(rng.integers(0, len(ptxt_base), npas).tolist())]
    pids = [chunk_id(t) for t in ptexts]
    by_passage: dict[str, list] = {}
    rows = []                                          # (passage_id, pos, s, p, o, fact_id)
    for o, t, fid in zip(owner.tolist(), triples, fids, strict=True):
        lst = by_passage.setdefault(pids[o], [])
        rows.append((pids[o], len(lst), t[0], t[1], t[2], fid))
        lst.append(t)
    syn_dst = rng.integers(0, e0 + nb - 1, nb) if e0 + nb > 1 else np.zeros(0, np.int64)
    src_num = np.arange(e0, e0 + nb)
    syn_dst = syn_dst + (syn_dst >= src_num)           # never the entity itself
    scores = rng.uniform(0.8, 1.0, nb)
    synonymy = {entity_ids[s]: {entity_ids[d]: float(w)}
                for s, d, w in zip(src_num.tolist(), syn_dst.tolist(), scores.tolist(), strict=False)}
    vec = {s: synth(rng, bases[s][0], counts[s]) for s in STORES}
    return {"passage": (pids, ptexts, vec["passage"]), "entity": (new_eids, new_phrases, vec["entity"]),
            "fact": (fids, ftexts, vec["fact"]), "triple_rows": rows, "passage_triples": by_passage,
            "synonymy": synonymy}


def triple_columns(db) -> list[str]:
    """The columns of ``passage_triples`` that the benchmark fills (``fact_id`` when present)."""
    have = [r[0] for r in db.conn.execute(
        "SELECT column_name FROM information_schema.columns WHERE table_schema = %s AND table_name = "
        "'passage_triples' ORDER BY ordinal_position", (db.schema,))]
    cols = ["passage_id", "pos", "subj", "pred", "obj"]
    return cols + (["fact_id"] if "fact_id" in have else [])


# ---------------------------------------------------------------------------- phases
def load_index(db, stores: dict, bases: dict, args, rng, res: dict, save) -> dict:
    """Write the synthetic index in batches of ``args.batch`` passages, one transaction each.
    Returns what the graph is built from (passage ids, triples per passage, synonymy lists) and
    a sample of the fact and passage vectors (for the neighbour profile)."""
    per = {"passage": 1.0, "entity": args.entities_per_passage, "fact": args.facts_per_passage}
    done = {s: 0 for s in STORES}
    total = {s: round(per[s] * args.passages) for s in STORES}
    keep_p = {s: min(1.0, PROFILE_ROWS / max(1, total[s])) for s in QUERY_STORES}
    sample = {s: [] for s in QUERY_STORES}
    cols = triple_columns(db)
    phrases: list[str] = []
    entity_ids: list[str] = []
    pids_all: list[str] = []
    passage_triples: dict[str, list] = {}
    synonymy: dict[str, dict[str, float]] = {}
    batches, t_all, db_s, syn_rows, tri_rows = [], time.perf_counter(), 0.0, 0, 0
    for start in range(0, args.passages, args.batch):
        stop = min(args.passages, start + args.batch)
        gen_t = time.perf_counter()
        counts = {s: (round(per[s] * stop) if stop < args.passages else total[s]) - done[s] for s in STORES}
        b = batch_content(rng, bases, dict(done), counts, phrases, entity_ids)
        for s in QUERY_STORES:
            v = b[s][2]
            sample[s].append(v[rng.random(len(v)) < keep_p[s]])
        gen_s = time.perf_counter() - gen_t
        t = time.perf_counter()
        with db.transaction() as c:
            for s in STORES:
                stores[s].upsert(*b[s])
            with c.cursor() as cur, cur.copy(f"COPY {db.q}.passage_triples ({', '.join(cols)}) FROM STDIN") as cp:
                for r in b["triple_rows"]:
                    cp.write_row(r[:len(cols)])
            with c.cursor() as cur, cur.copy(f"COPY {db.q}.synonymy (src, dst, score) FROM STDIN") as cp:
                for src, nb in b["synonymy"].items():
                    for dst, w in nb.items():
                        cp.write_row((src, dst, w))
        dt = time.perf_counter() - t
        db_s += dt
        for s in STORES:
            done[s] += counts[s]
        pids_all.extend(b["passage"][0])
        passage_triples.update(b["passage_triples"])
        synonymy.update(b["synonymy"])
        syn_rows += sum(len(x) for x in b["synonymy"].values())
        tri_rows += len(b["triple_rows"])
        batches.append({"passages": stop, "db_s": round(dt, 2), "gen_s": round(gen_s, 2), "load": load1()})
        print(f"batch to {stop} passages: db {dt:.1f}s gen {gen_s:.1f}s (load {load1()})", flush=True)
        del b
    vectors = sum(done.values())
    t = time.perf_counter()
    db.conn.execute("VACUUM ANALYZE")
    res["load"] = {"rows": dict(done), "vectors": vectors, "triples": tri_rows, "synonymy": syn_rows,
                   "triple_columns": cols, "db_s": round(db_s, 1), "wall_s": round(time.perf_counter() - t_all, 1),
                   "vacuum_analyze_s": round(time.perf_counter() - t, 1),
                   "vectors_per_s": round(vectors / db_s), "loader_peak_rss_mib": peak_mib(),
                   "loader_stores": "the loader writes through the engine writer's stores: ids in memory, no vectors",
                   "batches": batches, "load_avg": load1()}
    save()
    return {"passage_ids": pids_all, "passage_triples": passage_triples, "synonymy": synonymy,
            "sample": {s: np.concatenate(v) for s, v in sample.items()}}

