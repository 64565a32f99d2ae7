"""The engine's query process in the PostgreSQL scale benchmark, in a fresh process.

    python -m reproduce.bench.pg_scale_probe MODE DSN SCHEMA INDEX_DIR QUERIES.npz N OUT.json [BATCH]

``MODE`` is ``engine-lazy``, ``engine-exact``, ``engine-memory``, ``engine-exact-ppr``,
``engine-lazy-scan`` or ``engine-lazy-floor100``: ``HippoRAG(INDEX_DIR, storage="postgres", dsn=DSN,
postgres_schema=SCHEMA, postgres_search="hnsw" | "exact" | "memory" | "hnsw" | "hnsw" | "hnsw")``,
``engine-lazy-floor100`` with ``postgres_floor_ef_search=100`` (the default's 20 against the top
search's ``ef_search``), ``engine-exact-ppr`` with
``ppr_solver="exact"`` (the exact PPR kernel), ``engine-lazy-scan`` with ``dense_prior="scan"`` (every
passage scored for the prior; ``engine-lazy`` keeps the default, the prior from the passage HNSW
index: ``retrieve/ppr/ann_prior.py``); the others keep ``ppr_solver="auto"`` (forward push from
``ppr_push_min_nodes`` graph nodes on), then ``rag.retriever`` (what the retriever of the index's version holds: the
passage matrix, the graph from ``INDEX_DIR/graph.npz``, the PPR kernel; in ``memory`` mode every
vector), then ``N`` queries, one per ``Retriever.search`` call (top 10, no recognition filter).
The query vectors come from ``QUERIES.npz`` (``fact`` and ``passage`` arrays, one row per query),
so nothing is encoded: the facade gets :class:`NoEncoder`, which has the index's model name and
dimension and refuses to encode (encoding a query is outside what is measured). Writes
``OUT.json``: times, resident memory after each step (MiB), the peak (``VmHWM``), latency
p50/p95, the retriever's memory by part, and per query the top-10 passage ids, the candidate
facts and whether the dense fallback was used (for comparing modes).
"""
from __future__ import annotations

import itertools
import json
import logging
import os
import resource
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

STORES = ("passage", "entity", "fact")
SEARCH = {"engine-lazy": "hnsw", "engine-exact": "exact", "engine-memory": "memory", "engine-exact-ppr": "hnsw",
          "engine-lazy-scan": "hnsw", "engine-lazy-floor100": "hnsw"}
#: modes that override the configuration (the others keep the defaults: ``ppr_solver="auto"``,
#: ``dense_prior="auto"``, ``postgres_floor_ef_search=20``); ``engine-lazy-floor100``: the fact
#: normalisation's minimum searched with the top search's ``ef_search``, as before that setting
OVERRIDES = {"engine-exact-ppr": {"ppr_solver": "exact"}, "engine-lazy-scan": {"dense_prior": "scan"},
             "engine-lazy-floor100": {"postgres_floor_ef_search": 100}}
ENCODER_NAME = "synthetic-all-MiniLM-L6-v2"
MIB = 2**20


def load1() -> float:
    """The 1-minute load average."""
    return round(os.getloadavg()[0], 2)


def pct(xs, q) -> float | None:
    """The ``q``-th percentile of ``xs`` (seconds) in milliseconds."""
    return round(float(np.percentile(np.asarray(xs) * 1e3, q)), 2) if len(xs) else None


def rss_mib() -> float:
    """Resident memory of this process now (MiB)."""
    with open("/proc/self/statm") as f:
        return round(int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / MIB, 1)


def peak_mib() -> float:
    """Peak resident memory of this process (MiB): ``VmHWM``, the process's own ``ru_maxrss``
    (``getrusage``'s would include the parent's peak, which Linux carries across exec)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)  # pragma: no cover


# ---------------------------------------------------------------------------- sizes of objects
def array_bytes(a) -> int:
    """Bytes of an array; an object array counts its elements too (each once)."""
    a = np.asarray(a)
    if a.dtype != object:
        return int(a.nbytes)
    seen: set[int] = set()
    extra = 0
    for x in a.ravel():
        if id(x) not in seen:
            seen.add(id(x))
            extra += sys.getsizeof(x)
    return int(a.nbytes) + extra


def _small_bytes(x) -> int:
    """Bytes of a small Python value (a string, a tuple or list of strings, a small dict)."""
    n = sys.getsizeof(x)
    if isinstance(x, (tuple, list)):
        n += sum(sys.getsizeof(y) for y in x)
    elif isinstance(x, dict):
        n += sum(sys.getsizeof(k) + sys.getsizeof(v) for k, v in x.items())
    return n


def container_bytes(d, sample: int = 2000) -> int:
    """Estimated bytes of a dict, list or set (its table plus a sample of its entries, scaled)."""
    n = len(d)
    size = sys.getsizeof(d)
    if not n:
        return size
    items = list(itertools.islice(d.items() if isinstance(d, dict) else iter(d), sample))
    per = sum(_small_bytes(k) + _small_bytes(v) for k, v in items) if isinstance(d, dict) else \
        sum(_small_bytes(x) for x in items)
    return int(size + per / len(items) * n)


def graph_memory(g, kernel=None) -> dict:
    """MiB of a ``GraphData`` (node ids, edge arrays, edge parts) and of a ``PPRKernel``."""
    out = {"node_ids": array_bytes(g.node_ids),
           "edges": sum(array_bytes(getattr(g, k)) for k in ("src", "dst", "weight", "kinds")),
           "edge_parts": sum(array_bytes(getattr(g.parts, k)) for k in ("base", "syn_lo", "syn_hi", "syn_dirs"))
           if g.parts is not None else 0}
    if kernel is not None:
        out["ppr_kernel"] = int(kernel.nbytes)
    out["total"] = sum(out.values())
    return {k: round(v / MIB, 1) for k, v in out.items()}


def _object_bytes(x, depth: int, seen: set[int]) -> int:
    """Bytes held by ``x``: arrays, containers (estimated), and, ``depth`` levels down, the
    attributes of other objects; each object counted once."""
    if id(x) in seen or x is None or isinstance(x, (int, float, str, bool, type)):
        return 0
    seen.add(id(x))
    if isinstance(x, np.ndarray):
        return array_bytes(x)
    if isinstance(x, (dict, list, set, tuple)):
        return container_bytes(x)
    if hasattr(x, "nbytes") and not callable(x.nbytes) and isinstance(x.nbytes, (int, np.integer)):
        return int(x.nbytes)      # e.g. the PPR kernel, a scipy matrix
    if depth <= 0 or not hasattr(x, "__dict__"):
        return 0
    return sum(_object_bytes(v, depth - 1, seen) for v in vars(x).values())


def retriever_memory(r) -> dict:
    """MiB the retriever holds, by part: the passage matrix, fact ids, the graph (edge arrays
    and parts; node ids apart), the PPR kernel, then each other attribute that holds memory."""
    seen: set[int] = set()
    out: dict = {}
    g = getattr(r, "graph", None)
    named = {"passage_matrix": getattr(r, "passage_mat", None), "fact_ids": getattr(r, "fact_ids", None),
             "ppr_kernel": getattr(r, "kernel", None)}
    for k, v in named.items():
        out[k] = _object_bytes(v, 2, seen)
    if g is not None:
        seen.add(id(g))
        out["node_ids"] = _object_bytes(g.node_ids, 0, seen)
        out["graph_arrays"] = sum(_object_bytes(getattr(g, k), 0, seen) for k in ("src", "dst", "weight", "kinds"))
        if g.parts is not None:
            seen.add(id(g.parts))
            out["graph_arrays"] += sum(_object_bytes(getattr(g.parts, k), 0, seen)
                                       for k in ("base", "syn_lo", "syn_hi", "syn_dirs"))
        out["graph_other"] = _object_bytes(g.extra, 1, seen) + _object_bytes(vars(g).get("index_of"), 0, seen)
    other = {}
    for k, v in vars(r).items():
        b = _object_bytes(v, 2, seen)
        if b >= MIB // 10:
            other[k] = round(b / MIB, 1)
    res = {k: round(v / MIB, 1) for k, v in out.items()}
    res["other"] = other
    res["total"] = round(sum(out.values()) / MIB + sum(other.values()), 1)
    return res


# ---------------------------------------------------------------------------- the probe
def _no_encoder(dim: int):
    from hippo_engine.models.encoder import Encoder

    class NoEncoder(Encoder):
        """The index's model name and dimension; encoding is refused: the benchmark hands query
        vectors to ``Retriever.search``, so encoding is outside what is measured."""

        name = ENCODER_NAME

        def __init__(self):
            self.dim = dim

        def encode(self, texts: Sequence[str], **_):
            raise RuntimeError("the scale benchmark passes query vectors to Retriever.search; nothing is encoded")

    return NoEncoder()


def _passage_id(r, row: int):
    """The passage id of a passage store row (through the graph's node ids), else the row."""
    try:
        return str(r.graph.node_ids[int(r.passage_nodes[row])])
    except (AttributeError, IndexError, TypeError):
        return int(row)


class _Records(logging.Handler):
    """The engine's log lines (INFO and up), kept to be reported (the first 30)."""

    def __init__(self):
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if len(self.lines) < 30:
            self.lines.append(f"{record.levelname} {record.name}: {record.getMessage()}"[:300])


def _watch_graph_loads() -> list[bool]:
    """Record, for each ``GraphData.load`` call, whether it returned a graph (the call itself is
    the engine's)."""
    from hippo_engine.index.graph import GraphData
    calls: list[bool] = []
    original = GraphData.load.__func__

    def load(cls, *args, **kwargs):
        g = original(cls, *args, **kwargs)
        calls.append(g is not None)
        return g

    GraphData.load = classmethod(load)
    return calls


def probe(mode: str, dsn: str, schema: str, index_dir: str, qfile: str, n: int, batch: int = 1) -> dict:
    """Run in a fresh process: open the index as ``mode`` says, query it, report (see the module
    documentation). ``graph_loaded``: whether ``GraphData.load`` (watched, not changed) returned
    the graph of ``graph.npz``; if not, the engine rebuilt it from the database. ``batch`` > 1: the
    queries go ``batch`` per ``Retriever.search`` call (the rankings of a reference, faster; no
    single-query latency is reported then, only the time per query in batches)."""
    records = _Records()
    engine_log = logging.getLogger("hippo_engine")
    engine_log.addHandler(records)
    engine_log.setLevel(logging.INFO)
    loads = _watch_graph_loads()
    qs = np.load(qfile)
    q_fact, q_pass = qs["fact"].astype(np.float32), qs["passage"].astype(np.float32)
    n = min(n, len(q_fact))
    out: dict = {"mode": mode, "postgres_search": SEARCH[mode], "rss_start_mib": rss_mib()}
    t = time.perf_counter()
    from hippo_engine import HippoRAG
    out["import_s"], out["rss_after_import_mib"] = round(time.perf_counter() - t, 2), rss_mib()
    t = time.perf_counter()
    solver = OVERRIDES.get(mode, {})
    rag = HippoRAG(index_dir, storage="postgres", dsn=dsn, postgres_schema=schema, postgres_search=SEARCH[mode],
                   extractor="openie", show_progress=False, encoder=_no_encoder(q_fact.shape[1]), **solver)
    out["open_s"], out["rss_after_open_mib"] = round(time.perf_counter() - t, 2), rss_mib()
    t = time.perf_counter()
    r = rag.retriever
    out["retriever_s"], out["rss_after_retriever_mib"] = round(time.perf_counter() - t, 2), rss_mib()
    out["peak_after_retriever_mib"] = peak_mib()
    out["ppr_solver"], out["uses_push"] = r.ppr.ppr_solver, bool(r.uses_push)
    out["dense_prior"] = "ann" if r.ann_dense is not None and r.uses_push else "scan"
    t = time.perf_counter()
    out["retriever_memory_mib"] = retriever_memory(r)
    out["memory_count_s"] = round(time.perf_counter() - t, 1)
    lat, parts, per_query = [], {}, []
    for i in range(0, n, batch):
        j = min(n, i + batch)
        t = time.perf_counter()
        results, tim = r.search([f"query {x}" for x in range(i, j)], q_fact[i:j], q_pass[i:j], 10)
        lat.append((time.perf_counter() - t) / (j - i))
        for k, v in tim.items():
            parts.setdefault(k, []).append(v / (j - i))
        per_query += [{"passages": [_passage_id(r, int(x)) for x in np.asarray(res.order)[:10]],
                       "facts": [list(f) for f in res.candidate_facts[:5]],
                       "fallback": bool(res.used_fallback)} for res in results]
    if batch > 1:
        out.update({"batch": batch, "per_query_in_batches_ms": pct(lat, 50)})
    single = batch == 1
    out.update({"queries": n, "first_query_ms": pct(lat[:1], 50) if single else None,
                "query_p50_ms": pct(lat, 50) if single else None, "query_p95_ms": pct(lat, 95) if single else None,
                "query_parts_mean_ms": {k: round(float(np.mean(v)) * 1e3, 2) for k, v in parts.items()},
                "fallback_queries": sum(q["fallback"] for q in per_query),
                "rss_after_queries_mib": rss_mib(), "peak_rss_mib": peak_mib(), "load": load1()})
    t = time.perf_counter()
    rag.close()
    out["close_s"] = round(time.perf_counter() - t, 2)
    out["graph_loaded"] = any(loads)
    out["engine_log"] = records.lines
    out["per_query"] = per_query
    return out


def run_probe(mode: str, dsn: str, schema: str, index_dir: Path, qfile: Path, n: int, out_path: Path,
              batch: int = 1) -> dict:
    """:func:`probe` in a new Python process (its peak memory is its own); its report, or
    ``{"mode", "error"}``."""
    out_path.unlink(missing_ok=True)
    r = subprocess.run([sys.executable, "-m", "reproduce.bench.pg_scale_probe", mode, dsn, schema, str(index_dir),
                        str(qfile), str(n), str(out_path), str(batch)], capture_output=True, text=True, check=False)
    if r.returncode or not out_path.is_file():
        return {"mode": mode, "error": (r.stderr or r.stdout)[-3000:]}
    return json.loads(out_path.read_text())


def main(argv=None) -> int:
    """Command line: ``MODE DSN SCHEMA INDEX_DIR QUERIES.npz N OUT.json [BATCH]``."""
    args = list(sys.argv[1:] if argv is None else argv)
    mode, dsn, schema, index_dir, qfile, n, dst = args[:7]
    res = probe(mode, dsn, schema, index_dir, qfile, int(n), int(args[7]) if len(args) > 7 else 1)
    Path(dst).write_text(json.dumps(res) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
