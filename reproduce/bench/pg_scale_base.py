"""The base of the PostgreSQL scale benchmark (:mod:`reproduce.bench.pg_scale`, step 0 of its
documentation): the real vectors and texts the synthetic rows are derived from, read from SQLite
indexes, made by indexing a dataset with its released OpenIE file, or the ``--mixture`` stand-in."""
from __future__ import annotations

import json
import os
import shlex
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from ..common import MUSIQUE_TRAIN_DIR, REPO_ROOT
from .pg_scale_probe import STORES

BASE_DIR = "base"
BASE_MARKER = "base.json"


def unit(x: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length."""
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _decode(blob: bytes, dim: int) -> np.ndarray | None:
    """A stored vector (float32 or float16 blob) as float32, or ``None`` if it is not ``dim``-dim."""
    if len(blob) == 4 * dim:
        return np.frombuffer(blob, np.float32)
    if len(blob) == 2 * dim:
        return np.frombuffer(blob, np.float16).astype(np.float32)
    return None


def load_bases(paths, dim: int) -> tuple[dict, list[str], list[str]]:
    """Real vectors and texts per store from SQLite indexes (float32 or float16 blobs),
    deduplicated; the paths read and the embedding models their meta names. An index whose meta
    gives another dimension is skipped. Raises ``ValueError`` when a store has no ``dim``-dim
    vector in any of them."""
    vecs = {s: [] for s in STORES}
    texts = {s: [] for s in STORES}
    used, models, other_dims = [], [], set()
    for p in paths:
        if not Path(p).is_file():
            continue
        db = sqlite3.connect(f"file:{p}?mode=ro", uri=True)
        try:
            meta = {}
            if db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'meta'").fetchone():
                meta = dict(db.execute("SELECT key, value FROM meta"))
            if meta.get("dim") and int(meta["dim"]) != dim:
                other_dims.add(int(meta["dim"]))
                continue
            for s in STORES:
                for content, blob in db.execute(f"SELECT content, vec FROM store_{s}"):
                    v = _decode(blob, dim)
                    if v is None:
                        other_dims.add(len(blob) // 4)
                        continue
                    vecs[s].append(v)
                    texts[s].append(content)
            if meta.get("embedding_model") and meta["embedding_model"] not in models:
                models.append(meta["embedding_model"])
        finally:
            db.close()
        used.append(str(p))
    empty = [s for s in STORES if not vecs[s]]
    if empty:
        seen = f" (vectors of {sorted(other_dims)} dimensions found)" if other_dims else ""
        raise ValueError(f"no {dim}-dim vectors in the {', '.join(empty)} store(s) of {', '.join(map(str, paths))}"
                         f"{seen}: check --dim and --base-index")
    out = {}
    for s in STORES:
        mat, idx = np.unique(np.stack(vecs[s]), axis=0, return_index=True)
        out[s] = (unit(mat.astype(np.float32)), [texts[s][i] for i in idx])
    return out, used, models


def build_base(dest: Path, data: Path = MUSIQUE_TRAIN_DIR, *, encoder=None, limit: int | None = None,
               log=print) -> dict:
    """Index the dataset ``data`` (its first ``limit`` passages, all by default) into ``dest``
    with the engine: SQLite backend, recognition filter off, its released OpenIE file imported
    (no LLM call), ``encoder`` (``None``: the engine's default encoder). Indexing is idempotent,
    so a partial ``dest`` is completed. Writes and returns the description ``dest/base.json``
    (written last: its presence means the base is complete)."""
    from hippo_engine.evaluation.datasets import load_dataset

    from .reliability import open_engine
    ds = load_dataset(data)
    if ds.openie_file is None:
        raise ValueError(f"{data}: no openie_*.json beside the dataset; the base is indexed with the released "
                         "OpenIE results (no LLM call)")
    docs = list(ds.docs)[:limit] if limit else list(ds.docs)
    resumed = (dest / "index.sqlite").is_file()
    log(f"base: indexing {len(docs)} passages of {ds.name} ({ds.openie_file.name}) into {dest}"
        + (" (resuming)" if resumed else ""))
    t = time.perf_counter()
    rag = open_engine(dest, encoder, storage="sqlite", extractor="openie")
    try:
        rag.import_openie(ds.openie_file)
        rep = rag.index(docs)
    finally:
        rag.close()
    db = sqlite3.connect(f"file:{dest / 'index.sqlite'}?mode=ro", uri=True)
    try:
        meta = dict(db.execute("SELECT key, value FROM meta"))
        rows = {s: db.execute(f"SELECT COUNT(*) FROM store_{s}").fetchone()[0] for s in STORES}
    finally:
        db.close()
    info = {"dataset": ds.name, "data": str(Path(data).resolve()), "openie": ds.openie_file.name,
            "passages": len(docs), "corpus_passages": len(ds.docs), "encoder": meta.get("embedding_model"),
            "dim": int(meta["dim"]) if meta.get("dim") else None, "storage": "sqlite", "use_filter": False,
            "llm_calls": 0, "rows": rows, "index_s": round(time.perf_counter() - t, 1), "resumed": resumed,
            "added": rep.get("added"), "made": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}
    (dest / BASE_MARKER).write_text(json.dumps(info, indent=1) + "\n")
    log(f"base: {info}")
    return info


def make_base(work: Path, data: Path, limit: int | None, log=print) -> dict:
    """``<work>/base``: reused when complete (``base.json``) with the passages asked for, else
    built, completed or grown to them by :func:`build_base` in a child process (the encoder's
    memory stays out of the loader's figures); a base of other data or more passages is an
    error."""
    dest = work / BASE_DIR
    marker = dest / BASE_MARKER
    if (dest / "index.sqlite").is_file() and marker.is_file():
        have = json.loads(marker.read_text())
        want = limit or have.get("corpus_passages")
        same_data = "data" not in have or Path(have["data"]) == Path(data).resolve()
        if same_data and have.get("passages") == want:
            log(f"base: reusing {dest / 'index.sqlite'}")
            return {"kind": "reused", **have}
        if not same_data or not want or have.get("passages", 0) > want:
            raise ValueError(f"{dest} holds a base of {have.get('passages')} passages of {have.get('data')}, not "
                             f"{want or 'all'} of {Path(data).resolve()}: pass another --work")
        log(f"base: {dest} holds {have.get('passages')} passages, completing it to {want}")
    marker.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "reproduce.bench.pg_scale", "--build-base-into", str(dest.resolve()),
           "--data", str(Path(data).resolve()), *(["--base-passages", str(limit)] if limit else [])]
    env = {**os.environ, "HF_HUB_OFFLINE": os.environ.get("HF_HUB_OFFLINE", "1"),
           "TRANSFORMERS_OFFLINE": os.environ.get("TRANSFORMERS_OFFLINE", "1")}
    r = subprocess.run(cmd, cwd=REPO_ROOT, env=env, check=False)
    if r.returncode or not marker.is_file():
        raise RuntimeError(f"building the base failed (exit status {r.returncode}): {shlex.join(cmd)}")
    return {"kind": "built", **json.loads(marker.read_text())}


def choose_bases(args, work: Path, rng, log=print) -> tuple[dict, dict]:
    """The base vectors (store -> (unit vectors, texts)) and the description of the base:
    ``--mixture``, else the ``--base-index`` files that exist, else ``<work>/base`` (made by
    :func:`make_base`)."""
    if args.mixture:
        return mixture_bases(rng, args.dim), {
            "kind": "mixture", "vectors_from": "a gaussian mixture on the sphere (--mixture: no real vectors)"}
    given = [str(p) for p in args.base_index or []]
    present = [p for p in given if Path(p).is_file()]
    missing = [p for p in given if not Path(p).is_file()]
    if missing:
        log(f"base: not found: {', '.join(missing)}")
    if present:
        info = {"kind": "given", "paths": present}
    else:
        info = make_base(work, Path(args.data), args.base_passages, log)
        info["paths"] = [str(work / BASE_DIR / "index.sqlite")]
    if missing:
        info["missing"] = missing
    bases, used, models = load_bases(info["paths"], args.dim)
    what = f"real {', '.join(models)} vectors" if models else "the vectors"
    if info["kind"] == "given":
        info["vectors_from"] = f"{what} of {', '.join(used)} (--base-index)"
    else:
        info["vectors_from"] = (f"{what} of {info['dataset']} ({info['passages']} passages, released OpenIE file "
                                f"{info['openie']}), indexed by the benchmark into {used[0]} "
                                f"({'reused' if info['kind'] == 'reused' else 'built'} by this run)")
    info["models"] = models
    return bases, info


def mixture_bases(rng, dim: int, n: int = 2000) -> dict:
    """Fallback without real vectors: cluster centres on the sphere and placeholder texts."""
    lens = {"passage": 480, "entity": 17, "fact": 60}
    return {s: (unit(rng.standard_normal((n, dim)).astype(np.float32)), ["x" * lens[s]] * n) for s in STORES}

