"""Where the default query path's time goes at 1M passages: the store searches it makes, timed alone.

    python reproduce/results/pg_scale/1m/store_searches.py [WORK] [SCALE_JSON]

on the data directory a ``pg-scale --keep`` run left in WORK (default ``/tmp/pgscale1m``), with the server
settings of its SCALE_JSON (default ``scale.json`` beside this file). The server is started fresh (empty
shared buffers; the OS page cache holds whatever the machine kept). Printed, per search, p50/p95 ms:

1. the engine's own calls (``LazyPostgresStore``, as the retriever makes them): the fact search
   ``extremes(q, 5)`` (HNSW top candidates and the anti-query ``-q`` for the minimum of the min-max
   normalisation), the same with ``lowest=False``, and the passage prior's two ``nearest_ids(+-q, 400)``;
   on 100 fresh query vectors, then on the benchmark's own 200 (``queries.npz``: a second pass over pages
   its query processes read);
2. one SQL statement per query on the fact table (each variant on its own 40 fresh queries): top or
   anti-query, with or without the vector column (heap fetch), ``ef_search`` 100 or 20, pgvector's
   iterative scan on or off; and ``EXPLAIN (ANALYZE, BUFFERS)`` of one top and one anti-query.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[3]))

from hippo_engine.store.postgres.db import PostgresIndexStore  # noqa: E402
from hippo_engine.store.postgres.lazy import LazyPostgresStore  # noqa: E402
from hippo_engine.store.postgres.server import EmbeddedPostgres  # noqa: E402
from reproduce.bench.pg_scale_base import load_bases  # noqa: E402
from reproduce.bench.pg_scale_data import synth  # noqa: E402
from reproduce.bench.pg_scale_queries import SETTINGS  # noqa: E402


def timed(name: str, fn, queries) -> None:
    lat = []
    for q in queries:
        t = time.perf_counter()
        fn(q)
        lat.append((time.perf_counter() - t) * 1000)
    print(f"{name}: n {len(lat)}, p50 {np.percentile(lat, 50):.1f} ms, p95 {np.percentile(lat, 95):.1f} ms", flush=True)


def engine_calls(db, bases: dict, work: Path, rng) -> None:
    fact = LazyPostgresStore(db, "fact", 384, vector_dtype="float16")
    passage = LazyPostgresStore(db, "passage", 384, vector_dtype="float16")
    kept = np.load(work / "queries.npz")
    sets = (("fresh", {s: synth(rng, bases[s][0], 100) for s in ("fact", "passage")}),
            ("second pass", {"fact": kept["fact"], "passage": kept["passage"]}))
    for label, qs in sets:
        timed(f"{label}: fact extremes k=5 (top and -q)", lambda q: fact.extremes(q, 5, False), qs["fact"])
        timed(f"{label}: fact extremes k=5, top only", lambda q: fact.extremes(q, 5, False, lowest=False), qs["fact"])
        timed(f"{label}: passage nearest_ids k=400", lambda q: passage.nearest_ids(q, 400), qs["passage"])
        timed(f"{label}: passage nearest_ids -q k=400", lambda q: passage.nearest_ids(-q, 400), qs["passage"])


def sql_variants(dsn: str, bases: dict, rng) -> None:
    import psycopg
    from pgvector import HalfVector
    from pgvector.psycopg import register_vector

    with psycopg.connect(dsn, autocommit=True) as c:
        register_vector(c)

        def one(sign: int, cols: str, ef: int, iterative: bool):
            def run(q):
                with c.transaction():
                    c.execute("SELECT set_config('hnsw.ef_search', %s, true), "
                              "set_config('hnsw.iterative_scan', %s, true)",
                              (str(ef), "relaxed_order" if iterative else "off"))
                    c.execute(f'SELECT {cols} FROM "scale".store_fact ORDER BY vec <#> %s LIMIT %s',
                              (HalfVector(sign * q), ef)).fetchall()
            return run

        for name, args in (("top id,vec ef100 iterative", (1, "id, vec", 100, True)),
                           ("anti id,vec ef100 iterative", (-1, "id, vec", 100, True)),
                           ("anti id ef100 iterative", (-1, "id", 100, True)),
                           ("anti id,vec ef100 no iterative scan", (-1, "id, vec", 100, False)),
                           ("anti id,vec ef20 iterative", (-1, "id, vec", 20, True))):
            timed(f"SQL {name}", one(*args), synth(rng, bases["fact"][0], 40))
        q = synth(rng, bases["fact"][0], 1)[0]
        with c.transaction():
            c.execute("SELECT set_config('hnsw.ef_search', '100', true)")
            for sign in (1, -1):
                plan = c.execute('EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) SELECT id, vec FROM "scale".store_fact '
                                 "ORDER BY vec <#> %s LIMIT 100", (HalfVector(sign * q),)).fetchone()[0][0]
                print(f"EXPLAIN {'top' if sign > 0 else 'anti'}: {plan['Execution Time']:.1f} ms, shared hit "
                      f"{plan['Plan']['Shared Hit Blocks']}, read {plan['Plan']['Shared Read Blocks']}", flush=True)


def main(argv: list[str]) -> int:
    work = Path(argv[0]) if argv else Path("/tmp/pgscale1m")
    res = json.loads(Path(argv[1] if len(argv) > 1 else HERE / "scale.json").read_text())
    bases, _, _ = load_bases([work / "base" / "index.sqlite"], 384)
    rng = np.random.default_rng(12345)
    server = EmbeddedPostgres(work / "pg", settings={**SETTINGS, **res["settings"]})
    dsn = server.start()
    try:
        engine_calls(PostgresIndexStore(dsn, "scale"), bases, work, rng)
        sql_variants(dsn, bases, rng)
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
