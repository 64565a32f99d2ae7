"""The PostgreSQL scale benchmark at a tiny size (skipped without the PostgreSQL extra)."""
from __future__ import annotations

import json
import os
import sqlite3
import tempfile
from pathlib import Path

import numpy as np
from helpers import require_postgres

from reproduce.bench import pg_scale, pg_scale_report


def _server_available() -> None:
    require_postgres()


def _base_index(path: Path, dim: int) -> None:
    """A tiny SQLite index with the three stores' tables, float32 vectors."""
    rng = np.random.default_rng(1)
    db = sqlite3.connect(path)
    for s in pg_scale.STORES:
        db.execute(f"CREATE TABLE store_{s} (id TEXT PRIMARY KEY, content TEXT NOT NULL, vec BLOB NOT NULL)")
        vecs = pg_scale.unit(rng.standard_normal((150, dim)).astype(np.float32))
        db.executemany(f"INSERT INTO store_{s} VALUES (?, ?, ?)",
                       [(f"{s}-{i}", f"{s} text {i}", v.tobytes()) for i, v in enumerate(vecs)])
    db.commit()
    db.close()


def test_synthetic_vectors_are_unit_and_near_their_bases():
    rng = np.random.default_rng(0)
    base = pg_scale.unit(rng.standard_normal((50, 16)).astype(np.float32))
    x = pg_scale.synth(rng, base, 200)
    assert x.shape == (200, 16)
    assert np.allclose(np.linalg.norm(x, axis=1), 1, atol=1e-5)
    assert (x @ base.T).max(axis=1).mean() > 0.5
    subj, obj = pg_scale.fact_endpoints(rng, 40, 30, 45)     # 30 new entities after 40, 45 facts
    assert len(set(zip(subj.tolist(), obj.tolist(), strict=True))) == 45 and not (subj == obj).any()
    assert set(range(40, 70)) <= set(subj.tolist()) | set(obj.tolist())   # every new entity is linked
    assert subj.min() >= 40 and obj.max() < 70


def test_tiny_run_writes_figures_projection_and_readme(tmp_path):
    _server_available()
    dim = 32
    _base_index(tmp_path / "base.sqlite", dim)
    work = Path(tempfile.mkdtemp(prefix="hippo-pgscale-test-"))   # traversable by the server's user
    if os.geteuid() == 0:
        work.chmod(0o711)
    out = tmp_path / "scale.json"
    try:
        pg_scale.main(["--passages", "120", "--batch", "60", "--dim", str(dim), "--queries", "4",
                       "--exact-queries", "2", "--work", str(work), "--base-index", str(tmp_path / "base.sqlite"),
                       "--out", str(out), "--project", "1200"])
    finally:
        import shutil
        shutil.rmtree(work, ignore_errors=True)
    res = json.loads(out.read_text())
    assert res["load"]["rows"] == {"passage": 120, "entity": 1032, "fact": 1080}
    assert res["load"]["vectors"] == 2232
    assert "base.sqlite" in res["vectors_from"]
    for s in pg_scale.QUERY_STORES:
        q = res["queries"][s]
        assert 0.5 <= q["recall_at_10"] <= 1 and q["hnsw_p50_ms"] > 0
    assert set(res["hnsw_build"]) == set(pg_scale.QUERY_STORES)
    assert res["disk"]["tables_mib"]["store_fact"] > 0
    for mode in ("engine-lazy", "engine-exact", "engine-memory"):
        assert "error" not in res["query_process"][mode], res["query_process"][mode]
        assert res["query_process"][mode]["peak_rss_mib"] > 0
        assert res["query_process"][mode]["graph_loaded"]        # the reader took graph.npz, no rebuild
    p = res["projection"]
    assert p["factor"] == 10 and p["vectors"] == 22320
    readme = tmp_path / "README.md"
    pg_scale_report.main([str(out), str(readme)])
    text = readme.read_text()
    assert "Projection to 1,200 passages" in text and "recall@10" in text
