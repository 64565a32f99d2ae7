"""Is a PostgreSQL index written by one version of the writer equal to one written by another? On the
MuSiQue subset, through additions and a deletion (issue 26, point 2: the lean writer against the
code before it).

    python -m reproduce.bench.pg_scale_equal --work DIR --engine OLD_DIR [--engine NEW_DIR ...] [--out JSON]

Each ``--engine`` (a folder holding a ``hippo_engine`` package; ``.`` for this checkout) runs, in a
fresh process, the same steps into a new schema of one embedded server started in ``DIR/pg``:
``HippoRAG(storage="postgres", postgres_search="exact", extractor="openie", chunk_size=None,
use_filter=False, second_hop="none", dense_agree=0)`` (the settings of
``python -m reproduce rankings --variant openie``), the released OpenIE file imported (no LLM call:
an LLM that raises), then

1. ``index`` of the first 1,200 documents; the facade closed and opened again (the writer that
   follows has read nothing);
2. ``index`` of documents 1,000 to the end (200 already there);
3. ``delete`` of documents 300 to 499: the state **after the deletion** is recorded;
4. ``index`` of documents 300 to 499 again: the **full corpus**, recorded, and the rankings hash of
   every question (the hash of ``reproduce/rankings.py``; for the full corpus it is the published
   one, ``11059dbcf6e65b26``, when the index equals a one-shot build).

Recorded per state: a SHA-256 of each part of :func:`hippo_engine.index.diagnostics.snapshot_index`
(each store's ids, texts and vector bytes; the graph's nodes and edges with their float64 weights
written exactly; the synonymy lists; the documents) and the row counts. Vectors come from
:class:`CachedEncoder`: the first engine's real encoder fills ``DIR/vectors.npz`` and the others
read it, so every engine sees the same vectors (the engine's encoder gives a text the same vector
in any batch, so they are also a one-shot build's). The result (``--out``) lists each engine's
figures and which parts differ from the first engine's.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

#: this checkout (``reproduce.common`` imports ``hippo_engine``, which ``--engine`` replaces)
REPO_ROOT = Path(__file__).resolve().parents[2]
MUSIQUE = REPO_ROOT.parent / "shared" / "data" / "musique" / "hipporag_v1_train"
SETTINGS = {"postgres_search": "exact", "extractor": "openie", "chunk_size": None, "use_filter": False,
            "second_hop": "none", "dense_agree": 0, "dense_weight": 0.0}
STEPS = (("index", 0, 1200), ("reopen", 0, 0), ("index", 1000, None), ("delete", 300, 500), ("record", 0, 0),
         ("index", 300, 500), ("record", 0, 0))


class CachedEncoder:
    """An encoder whose vectors come from ``path`` (``keys``: JSON of ``[instruction, text]`` pairs,
    ``vectors``), those missing computed by ``make()`` (the real encoder) and added to the file by
    :meth:`save`."""

    def __init__(self, path: Path, make):
        self.path, self._make, self._real = Path(path), make, None
        self._rows: dict[tuple[str, str], int] = {}
        self._vecs: list[np.ndarray] = []
        self.misses = 0
        if self.path.is_file():
            with np.load(self.path, allow_pickle=False) as z:
                keys = json.loads(str(z["keys"]))
                self._vecs = list(z["vectors"])
                self.name, self.dim = str(z["name"]), int(z["dim"])
            self._rows = {(k[0], k[1]): i for i, k in enumerate(keys)}
        else:
            self._real = make()
            self.name, self.dim = self._real.name, int(self._real.dim)

    def encode(self, texts: Sequence[str], *, instruction: str | None = None, **kw) -> np.ndarray:
        keys = [(instruction or "", t) for t in texts]
        missing = list(dict.fromkeys(k for k in keys if k not in self._rows))
        if missing:
            self.misses += len(missing)
            if self._real is None:
                self._real = self._make()
            got = self._real.encode([t for _, t in missing], instruction=instruction, **kw)
            for k, v in zip(missing, got, strict=True):
                self._rows[k] = len(self._vecs)
                self._vecs.append(np.asarray(v, np.float32))
        out = np.empty((len(keys), self.dim), np.float32)
        for i, k in enumerate(keys):
            out[i] = self._vecs[self._rows[k]]
        return out

    def save(self) -> None:
        keys = [list(k) for k, _ in sorted(self._rows.items(), key=lambda kv: kv[1])]
        tmp = self.path.with_suffix(".tmp.npz")
        np.savez(tmp, keys=np.array(json.dumps(keys)), vectors=np.array(self._vecs, np.float32),
                 name=np.array(self.name), dim=np.array(self.dim))
        os.replace(tmp, self.path)


def digests(rag) -> dict:
    """SHA-256 (16 hex digits) of each part of the index's snapshot, and the row counts."""
    from hippo_engine.index.diagnostics import snapshot_index
    snap = snapshot_index(rag)
    out: dict = {}
    for ns in ("passage", "entity", "fact"):
        h = hashlib.sha256()
        for k in sorted(snap[ns]):
            text, vec = snap[ns][k]
            h.update(json.dumps([k, text]).encode("utf-8"))
            h.update(np.asarray(vec, np.float32).tobytes())
        out[ns] = h.hexdigest()[:16]
        out[f"{ns}_rows"] = len(snap[ns])
    out["graph_nodes"] = hashlib.sha256(json.dumps(snap["nodes"]).encode()).hexdigest()[:16]
    edges = sorted([a, b, float(w).hex()] for (a, b), w in snap["edges"].items())
    out["graph_edges"] = hashlib.sha256(json.dumps(edges).encode()).hexdigest()[:16]
    out["edges"] = len(edges)
    syn = sorted([s, sorted([d, float(w).hex()] for d, w in nb.items())] for s, nb in snap["synonymy"].items())
    out["synonymy"] = hashlib.sha256(json.dumps(syn).encode()).hexdigest()[:16]
    out["documents"] = hashlib.sha256(json.dumps(snap["documents"], sort_keys=True).encode()).hexdigest()[:16]
    return out


def child(engine: str, dsn: str, schema: str, work: Path, out_path: Path) -> int:
    """One engine's run (see the module documentation), in this process."""
    sys.path.insert(0, str(Path(engine).resolve()))
    import hippo_engine
    from hippo_engine import HippoRAG
    from hippo_engine.evaluation.datasets import load_dataset
    from hippo_engine.llm.base import LLMClient, LLMError

    from ..rankings import ranking_payload, rankings_hash
    from .pg_scale_probe import peak_mib

    class NoLLM(LLMClient):
        model_name = "gpt-3.5-turbo-1106"

        def generate(self, messages, **kw):
            raise LLMError("an LLM call was made although every passage has an OpenIE result")

    ds = load_dataset(MUSIQUE)
    docs = list(ds.docs)
    def real_encoder():
        from hippo_engine.config import HippoConfig
        from hippo_engine.llm.providers import Models
        return Models(HippoConfig(show_progress=False), work / "models").encoder()
    encoder = CachedEncoder(work / "vectors.npz", real_encoder)
    res: dict = {"engine": str(Path(hippo_engine.__file__).parent), "schema": schema, "steps": [], "states": []}

    def open_rag():
        rag = HippoRAG(work / schema, storage="postgres", dsn=dsn, postgres_schema=schema, llm=NoLLM(),
                       encoder=encoder, show_progress=False, **SETTINGS)
        openie = next(MUSIQUE.glob("openie_*.json"))
        rag.import_openie(openie)
        return rag
    rag = open_rag()
    t0 = time.perf_counter()
    for op, a, b in STEPS:
        t = time.perf_counter()
        if op == "reopen":
            rag.close()
            rag = open_rag()
        elif op == "index":
            rep = rag.index(docs[a:b])
            res["steps"].append({"op": f"index docs[{a}:{b}]", "added": rep.get("added"),
                                 "removed": rep.get("removed"), "s": round(time.perf_counter() - t, 1)})
        elif op == "delete":
            rep = rag.delete(docs=docs[a:b])
            res["steps"].append({"op": f"delete docs[{a}:{b}]", "removed": rep.get("removed"),
                                 "removed_entities": rep.get("removed_entities"),
                                 "removed_facts": rep.get("removed_facts"), "s": round(time.perf_counter() - t, 1)})
        else:
            state = digests(rag)
            state["passages"] = len(rag.index_state)
            if state["passages"] == len(docs):
                sols = rag.retrieve(list(ds.questions))
                state["rankings_hash"] = rankings_hash(ranking_payload(sols))
            res["states"].append(state)
    res["total_s"] = round(time.perf_counter() - t0, 1)
    res["peak_rss_mib"] = peak_mib()
    res["encoder_misses"] = encoder.misses
    rag.close()
    encoder.save()
    out_path.write_text(json.dumps(res, indent=1) + "\n")
    return 0


def compare(runs: list[dict]) -> list[dict]:
    """For each run after the first: per recorded state, the parts that differ from the first run's."""
    out = []
    first = runs[0]
    for r in runs[1:]:
        diffs = []
        for i, (a, b) in enumerate(zip(first.get("states", []), r.get("states", []), strict=False)):
            diffs.append({"state": i, "differs": sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))})
        out.append({"engine": r.get("engine"), "states": diffs,
                    "equal": bool(diffs) and all(not d["differs"] for d in diffs)
                    and len(first.get("states", [])) == len(r.get("states", []))})
    return out


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] == "child":
        _, engine, dsn, schema, work, dst = args
        return child(engine, dsn, schema, Path(work), Path(dst))
    ap = argparse.ArgumentParser(prog="python -m reproduce.bench.pg_scale_equal")
    ap.add_argument("--work", required=True)
    ap.add_argument("--engine", action="append", required=True, help="a folder holding hippo_engine (repeat)")
    ap.add_argument("--out", default=None)
    a = ap.parse_args(args)
    from hippo_engine.store.postgres.server import EmbeddedPostgres
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    if os.geteuid() == 0:
        work.chmod(0o711)
    server = EmbeddedPostgres(work / "pg")
    runs = []
    try:
        dsn = server.start()
        for i, engine in enumerate(a.engine):
            dst = work / f"run{i}.json"
            dst.unlink(missing_ok=True)
            schema = f"eq{i}_{int(time.time())}"        # a schema of its own on each run
            cmd = [sys.executable, "-m", "reproduce.bench.pg_scale_equal", "child", engine, dsn, schema, str(work),
                   str(dst)]
            r = subprocess.run(cmd, cwd=REPO_ROOT, check=False, env={**os.environ, "HF_HUB_OFFLINE": "1"})
            runs.append(json.loads(dst.read_text()) if r.returncode == 0 and dst.is_file()
                        else {"engine": engine, "error": f"exit status {r.returncode}"})
            print(json.dumps(runs[-1], indent=1), flush=True)
    finally:
        server.stop()
    result = {"command": "python -m reproduce.bench.pg_scale_equal " + " ".join(args), "runs": runs,
              "comparison": compare(runs), "load": os.getloadavg()[0]}
    text = json.dumps(result, indent=1) + "\n"
    if a.out:
        Path(a.out).write_text(text)
    print(json.dumps(result["comparison"], indent=1))
    return 0 if all(c["equal"] for c in result["comparison"]) else 1


if __name__ == "__main__":
    sys.exit(main())
