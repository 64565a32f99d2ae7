"""Query-process memory of the PostgreSQL scale benchmark, in a fresh process.

    python -m reproduce.bench.pg_scale_probe MODE DSN SCHEMA DIM QUERIES.npz

``engine-open`` opens the stores as the engine does (every vector mirrored in RAM) and queries
them with ``nearest()``; ``raw`` queries the HNSW indexes through a plain connection (nothing
loaded), then loads what a lazy reader would still hold (every id as a numpy bytes array, the
passage matrix in float16). Prints one JSON line: times and resident memory (MiB).
"""
from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

STORES = ("passage", "entity", "fact")
QUERY_STORES = ("fact", "passage")


def load1() -> float:
    """The 1-minute load average."""
    return round(os.getloadavg()[0], 2)


def pct(xs, q) -> float:
    """The ``q``-th percentile of ``xs`` (seconds) in milliseconds."""
    return round(float(np.percentile(np.asarray(xs) * 1e3, q)), 2)


def rss_mib() -> float:
    """Resident memory of this process now (MiB)."""
    with open("/proc/self/statm") as f:
        return round(int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20, 1)


def peak_mib() -> float:
    """Peak resident memory of this process (MiB): ``VmHWM`` (``ru_maxrss`` would include the
    parent's peak, which Linux carries across exec)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)  # pragma: no cover


def probe(mode: str, dsn: str, schema: str, dim: int, qfile: str) -> dict:
    """Run in a fresh process: open/query as ``mode`` says, report times and memory."""
    qs = np.load(qfile)
    out = {"mode": mode, "rss_start_mib": rss_mib()}
    if mode == "engine-open":
        from hippo_engine.store.postgres.db import PostgresIndexStore
        t = time.perf_counter()
        db = PostgresIndexStore(dsn, schema)
        st = {s: db.embedding_store(s, dim, vector_dtype="float16") for s in STORES}
        out["open_s"], out["rss_after_open_mib"] = round(time.perf_counter() - t, 1), rss_mib()
        lat = []
        for s in QUERY_STORES:
            for qv in qs[s]:
                t = time.perf_counter()
                st[s].nearest(qv, 10)
                lat.append(time.perf_counter() - t)
        db.close()
    else:
        import psycopg
        from pgvector import HalfVector
        from pgvector.psycopg import register_vector
        conn = psycopg.connect(dsn, autocommit=True)
        register_vector(conn)
        lat = []
        for s in QUERY_STORES:
            for qv in qs[s]:
                t = time.perf_counter()
                with conn.transaction():
                    conn.execute("SET LOCAL hnsw.ef_search = 100")
                    rows = conn.execute(f'SELECT id, vec FROM "{schema}".store_{s} ORDER BY vec <#> %s LIMIT 100',
                                        (HalfVector(qv),), binary=True).fetchall()
                cand = np.array([r[1].to_numpy() for r in rows], np.float32)
                np.argsort(-(cand @ qv), kind="stable")[:10]
                lat.append(time.perf_counter() - t)
        out["peak_after_queries_mib"] = peak_mib()
        t = time.perf_counter()
        ids = {s: np.array([r[0].encode() for r in conn.execute(f'SELECT id FROM "{schema}".store_{s} ORDER BY id')])
               for s in STORES}
        n = len(ids["passage"])
        mat = np.empty((n, dim), np.float16)
        with conn.cursor() as cur, cur.copy(f'COPY (SELECT vec FROM "{schema}".store_passage ORDER BY id) '
                                            "TO STDOUT (FORMAT BINARY)") as cp:
            data = b"".join(bytes(ch) for ch in cp)
        rowlen = 2 + 4 + 4 + 2 * dim
        body = data[19:19 + n * rowlen]
        mat[:] = np.frombuffer(body, np.uint8).reshape(n, rowlen)[:, 10:].copy().view(">f2")
        del data, body
        out["lazy_load_s"] = round(time.perf_counter() - t, 1)
        out["ids_mib"] = round(sum(a.nbytes for a in ids.values()) / 2**20, 1)
        out["passage_matrix_mib"] = round(mat.nbytes / 2**20, 1)
        out["rss_after_lazy_load_mib"] = rss_mib()
        conn.close()
    out.update({"query_p50_ms": pct(lat, 50), "query_p95_ms": pct(lat, 95), "queries": len(lat),
                "peak_rss_mib": peak_mib(), "load": load1()})
    return out


def run_probe(mode: str, dsn: str, schema: str, dim: int, qfile: Path) -> dict:
    """:func:`probe` in a new Python process (its peak memory is its own)."""
    r = subprocess.run([sys.executable, "-m", "reproduce.bench.pg_scale_probe", mode, dsn, schema, str(dim),
                        str(qfile)],
                       capture_output=True, text=True, check=False)
    if r.returncode:
        return {"mode": mode, "error": r.stderr[-2000:]}
    return json.loads(r.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    """Command line: ``MODE DSN SCHEMA DIM QUERIES.npz``."""
    mode, dsn, schema, dim, qfile = sys.argv[1:] if argv is None else argv
    print(json.dumps(probe(mode, dsn, schema, int(dim), qfile)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
