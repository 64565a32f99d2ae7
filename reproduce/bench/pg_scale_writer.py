"""The engine's writer in the PostgreSQL scale benchmark: peak memory of one change, in a fresh process.

    python -m reproduce.bench.pg_scale_writer add|remove DSN SCHEMA INDEX_DIR N SEED OUT.json

``add``: ``HippoRAG(INDEX_DIR, storage="postgres", dsn=DSN, postgres_schema=SCHEMA,
postgres_search=...)`` (``"hnsw"`` when the fact store has its HNSW index, else ``"exact"``: the
writer is the same, its stores hold no vector either way), then one change through the engine's
writer (:class:`hippo_engine.index.writer.IndexWriter`, what ``HippoRAG.index`` runs after
extraction): ``N`` new passages, each with its document row and 9 OpenIE triples whose subjects
are 9 new entities (the benchmark's 8.6 a passage, rounded) and whose objects are drawn from the
index's entities (the benchmark's phrases ``"entity n"``), so the change touches the stored graph
and the synonymy lists. ``remove``: the documents an ``add`` with the same ``SEED`` wrote are deleted
(``IndexWriter.delete``): their passages, the entities and facts only they held, the synonymy
lists, the graph.

The vectors come from :class:`HashEncoder` (a unit vector per text from its hash: deterministic,
no model loaded), so the figures are the writer's own: the issue's bound is "1 GB plus the
encoder". Writes ``OUT.json``: resident memory after the imports, after opening the index and after
the change, the peak (``VmHWM``) and the peak above the imports, the stage timings of the change
(the writer's ``Stopwatch``), its report, the index's rows before and after, the load.
"""
from __future__ import annotations

import hashlib
import json
import shlex
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from .pg_scale_probe import ENCODER_NAME, load1, peak_mib, rss_mib

#: this checkout (not ``reproduce.common``'s: importing it imports ``hippo_engine``, which ``--engine`` replaces)
REPO_ROOT = Path(__file__).resolve().parents[2]

ENTITIES_PER_PASSAGE = 8.6
FACTS_PER_PASSAGE = 9
PREDICATE = "related to"


def hash_encoder(dim: int):
    """An :class:`~hippo_engine.models.encoder.Encoder` named like the benchmark's index whose
    vector of a text is a unit gaussian seeded by the text's hash (no model in memory)."""
    from hippo_engine.models.encoder import Encoder

    class HashEncoder(Encoder):
        """A unit vector per text, from the BLAKE2b hash of the text."""

        name = ENCODER_NAME

        def __init__(self):
            self.dim = dim

        def encode(self, texts: Sequence[str], **_) -> np.ndarray:
            out = np.empty((len(texts), self.dim), np.float32)
            for i, t in enumerate(texts):
                seed = int.from_bytes(hashlib.blake2b(t.encode("utf-8"), digest_size=8).digest(), "big")
                v = np.random.default_rng(seed).standard_normal(self.dim).astype(np.float32)
                out[i] = v / np.linalg.norm(v)
            return out

    return HashEncoder()


def change(n: int, seed: int, entities: int) -> tuple[dict[str, list[str]], dict[str, str], dict[str, list]]:
    """The documents (id -> its one passage id), passages (id -> text) and triples of an ``add``
    of ``n`` passages (see the module documentation); ``entities``: how many the index holds."""
    from hippo_engine.ids import chunk_id
    rng = np.random.default_rng(seed)
    docs, passages, triples = {}, {}, {}
    new_per = int(round(ENTITIES_PER_PASSAGE))
    for i in range(n):
        text = f"writer passage {seed}-{i}: " + " ".join(f"word{int(w)}" for w in rng.integers(0, 5000, 60))
        pid = chunk_id(text)
        new = [f"writer entity {seed}-{i}-{j}" for j in range(new_per)]
        olds = [f"entity {int(k)}" for k in rng.integers(0, max(entities, 1), FACTS_PER_PASSAGE)] if entities \
            else new
        tri = [(new[j % len(new)], PREDICATE, olds[j]) for j in range(FACTS_PER_PASSAGE)]
        docs[f"writer-doc-{seed}-{i}"] = [pid]
        passages[pid] = text
        triples[pid] = tri
    return docs, passages, triples


def rows(db) -> dict[str, int]:
    """Rows per store table of the index (0 where the table is missing)."""
    out = {}
    for s in ("passage", "entity", "fact"):
        if db.table_exists(f"store_{s}"):
            out[s] = int(db.conn.execute(f"SELECT count(*) FROM {db.q}.store_{s}").fetchone()[0])
        else:
            out[s] = 0
    return out


def probe(action: str, dsn: str, schema: str, index_dir: str, n: int, seed: int, dim: int = 384,
          tracemalloc_on: bool = False) -> dict:
    """Run in a fresh process: open the index, make the change ``action`` (``add``/``remove``),
    report (see the module documentation). ``dim``: the vectors' dimension when the index does not
    record one."""
    out: dict = {"action": action, "passages": n, "seed": seed, "rss_start_mib": rss_mib()}
    from hippo_engine import HippoRAG
    from hippo_engine.index.stopwatch import Stopwatch
    from hippo_engine.index.writer import IndexWriter
    from hippo_engine.store.postgres.db import PostgresIndexStore
    peek = PostgresIndexStore(dsn, schema)
    try:
        search = "hnsw" if peek.table_exists("store_fact_hnsw") else "exact"
        out["rows_before"] = rows(peek)
        dim = int(peek.get_meta("dim") or dim)
    finally:
        peek.close()
    out["rss_after_import_mib"] = rss_mib()
    out["peak_after_import_mib"] = peak_mib()
    if tracemalloc_on:
        import tracemalloc
        tracemalloc.start()
    t = time.perf_counter()
    rag = HippoRAG(index_dir, storage="postgres", dsn=dsn, postgres_schema=schema, postgres_search=search,
                   extractor="openie", show_progress=False, embedding_storage_dtype="float16",
                   encoder=hash_encoder(dim))
    state = rag.index_state
    out.update(postgres_search=search, open_s=round(time.perf_counter() - t, 2), rss_after_open_mib=rss_mib())
    watch = Stopwatch()
    writer = IndexWriter(state, watch)
    docs, passages, triples = change(n, seed, out["rows_before"]["entity"])
    t = time.perf_counter()
    if action == "add":
        report = writer.index(docs, passages, triples, extractor="openie")
    elif action == "remove":
        report = writer.delete(list(docs))
    else:
        raise ValueError(f"action must be add or remove, not {action!r}")
    out["change_s"] = round(time.perf_counter() - t, 2)
    out["rss_after_change_mib"] = rss_mib()
    out["peak_rss_mib"] = peak_mib()
    out["peak_above_import_mib"] = round(out["peak_rss_mib"] - out["rss_after_import_mib"], 1)
    if tracemalloc_on:
        import tracemalloc
        out["tracemalloc_peak_mib"] = round(tracemalloc.get_traced_memory()[1] / 2**20, 1)
        tracemalloc.stop()
    out["timings_s"] = {k: round(v, 2) for k, v in watch.report().items()}
    out["report"] = {k: v for k, v in report.items() if k != "documents"}
    out["rows_after"] = rows(state.db)
    out["version"] = state.loaded_version
    out["content_loaded"] = state.content_loaded
    out["load"] = load1()
    rag.close()
    return out


def run_writer(action: str, dsn: str, schema: str, index_dir: Path, n: int, seed: int, out_path: Path, *,
               engine: str | None = None, tracemalloc_on: bool = False) -> dict:
    """:func:`probe` in a new Python process (its peak memory is its own); its report, or
    ``{"action", "error"}``. ``engine``: a folder whose ``hippo_engine`` the process imports
    instead of this checkout's (to measure another version of the writer)."""
    out_path.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "reproduce.bench.pg_scale_writer", action, dsn, schema, str(index_dir), str(n),
           str(seed), str(out_path)] + (["--tracemalloc"] if tracemalloc_on else []) + \
        (["--engine", str(engine)] if engine else [])
    r = subprocess.run(cmd, capture_output=True, text=True, check=False, cwd=REPO_ROOT)
    if r.returncode or not out_path.is_file():
        return {"action": action, "error": (r.stderr or r.stdout)[-3000:]}
    return json.loads(out_path.read_text())


def writer_rss(dsn: str, schema: str, index_dir: Path, n: int, *, seed: int = 1, engine: str | None = None,
               save=None) -> dict:
    """An ``add`` of ``n`` passages, then a ``remove`` of them, each in a fresh process (the index
    holds what it held before afterwards; its version moved on by two); ``save(record)`` after each."""
    rec: dict = {"passages": n, "encoder": "HashEncoder (no model: the figures are the writer's own)",
                 "engine": engine or str(REPO_ROOT)}
    for action in ("add", "remove"):
        got = run_writer(action, dsn, schema, index_dir, n, seed, index_dir.parent / f"writer-{action}.json",
                         engine=engine)
        rec[action] = got
        print(f"writer {action}: {got}", flush=True)
        if save is not None:
            save(rec)
    return rec


def _child(args: list[str]) -> int:
    """``add|remove DSN SCHEMA INDEX_DIR N SEED OUT.json [--tracemalloc] [--engine DIR]``."""
    trace = "--tracemalloc" in args
    args = [a for a in args if a != "--tracemalloc"]
    if "--engine" in args:
        i = args.index("--engine")
        sys.path.insert(0, args[i + 1])   # before hippo_engine is first imported
        del args[i:i + 2]
    action, dsn, schema, index_dir, n, seed, dst = args
    res = probe(action, dsn, schema, index_dir, int(n), int(seed), tracemalloc_on=trace)
    import hippo_engine
    res["hippo_engine"] = str(Path(hippo_engine.__file__).parent)
    Path(dst).write_text(json.dumps(res) + "\n")
    return 0


def main(argv=None) -> int:
    """The child process (``add``/``remove``, see :func:`_child`), or on an index a ``pg-scale``
    run kept (``--keep``): ``--work DIR --label TEXT --out JSON [--schema S] [--passages N] [--seed K]
    [--engine DIR]``: its embedded server started, :func:`writer_rss` run, the record appended to
    ``writer_runs`` of ``--out`` (a ``pg-scale`` result: its README is written again beside it)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] in ("add", "remove"):
        return _child(args)
    import argparse

    from hippo_engine.store.postgres.server import EmbeddedPostgres

    from .pg_scale_projection import add_projection
    from .pg_scale_queries import SETTINGS
    from .pg_scale_report import render
    ap = argparse.ArgumentParser(prog="python -m reproduce.bench.pg_scale_writer")
    ap.add_argument("--work", required=True, help="the --work folder of a pg-scale run made with --keep")
    ap.add_argument("--label", required=True, help="what is measured (e.g. the engine's version)")
    ap.add_argument("--out", required=True, help="JSON file the record is appended to (writer_runs)")
    ap.add_argument("--schema", default="scale")
    ap.add_argument("--passages", type=int, default=200)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--engine", default=None, help="import hippo_engine from this folder (another version)")
    a = ap.parse_args(args)
    out = Path(a.out)
    res = json.loads(out.read_text()) if out.is_file() else {}
    runs = res.setdefault("writer_runs", [])
    slot = len(runs)
    runs.append({})

    def save(rec: dict) -> None:
        runs[slot] = {"label": a.label, "command": f"python -m reproduce.bench.pg_scale_writer {shlex.join(args)}",
                      "index_rows": rec.get("add", {}).get("rows_before"), "load": load1(), **rec}
        out.write_text(json.dumps(res, indent=1) + "\n")
        if "args" in res:
            add_projection(res, res.get("projection", {}).get("passages", 1_000_000))
            out.with_name("README.md").write_text(render(res) + "\n")

    server = EmbeddedPostgres(Path(a.work) / "pg", settings=SETTINGS)
    try:
        dsn = server.start()
        writer_rss(dsn, a.schema, Path(a.work) / "index", a.passages, seed=a.seed, engine=a.engine, save=save)
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
