"""The PostgreSQL scale benchmark (``python -m reproduce pg-scale``): its base (given, built from a
dataset with its OpenIE file, reused, or the ``--mixture`` stand-in) and a tiny run (skipped
without the PostgreSQL extra)."""
from __future__ import annotations

import argparse
import json
import os
import sqlite3
import tempfile
from pathlib import Path

import numpy as np
import pytest
from fakes import NgramEncoder
from helpers import CORPUS, require_postgres, toy_openie
from toy_tables import make_dataset

from reproduce.bench import pg_scale, pg_scale_report
from reproduce.cli import STORAGE, build_parser
from reproduce.cli import main as cli_main


def _base_index(path: Path, dim: int, meta: dict | None = None) -> None:
    """A tiny SQLite index with the three stores' tables, float32 vectors (and ``meta`` rows)."""
    rng = np.random.default_rng(1)
    path.parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(path)
    if meta is not None:
        db.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        db.executemany("INSERT INTO meta VALUES (?, ?)", list(meta.items()))
    for s in pg_scale.STORES:
        db.execute(f"CREATE TABLE store_{s} (id TEXT PRIMARY KEY, content TEXT NOT NULL, vec BLOB NOT NULL)")
        vecs = pg_scale.unit(rng.standard_normal((150, dim)).astype(np.float32))
        db.executemany(f"INSERT INTO store_{s} VALUES (?, ?, ?)",
                       [(f"{s}-{i}", f"{s} text {i}", v.tobytes()) for i, v in enumerate(vecs)])
    db.commit()
    db.close()


def _args(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser()
    pg_scale.add_arguments(ap)
    return ap.parse_args(argv)


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


def test_registered_as_a_reproduce_command():
    assert STORAGE["pg-scale"][0] is pg_scale
    args = build_parser().parse_args(["pg-scale", "--mixture", "--passages", "10"])
    assert args.command == "pg-scale" and args.mixture and args.passages == 10 and args.base_index is None
    with pytest.raises(SystemExit):                  # a base or the mixture, not both
        build_parser().parse_args(["pg-scale", "--mixture", "--base-index", "x.sqlite"])


def test_base_choice_mixture_given_reused_and_wrong_dim(tmp_path):
    rng = np.random.default_rng(0)
    logs: list[str] = []
    bases, info = pg_scale.choose_bases(_args(["--mixture", "--dim", "8"]), tmp_path, rng, logs.append)
    assert info["kind"] == "mixture" and "gaussian mixture" in info["vectors_from"]
    assert {s: bases[s][0].shape[1] for s in pg_scale.STORES} == {s: 8 for s in pg_scale.STORES}
    _base_index(tmp_path / "given.sqlite", 8)
    bases, info = pg_scale.choose_bases(
        _args(["--dim", "8", "--base-index", str(tmp_path / "nowhere.sqlite"), str(tmp_path / "given.sqlite")]),
        tmp_path, rng, logs.append)
    assert info["kind"] == "given" and info["paths"] == [str(tmp_path / "given.sqlite")]
    assert info["missing"] == [str(tmp_path / "nowhere.sqlite")] and "given.sqlite" in info["vectors_from"]
    assert len(bases["fact"][1]) == 150
    # no --base-index that exists: <work>/base, here complete already (base.json), so reused without building
    work = tmp_path / "work"
    _base_index(work / "base" / "index.sqlite", 8, {"embedding_model": "all-MiniLM-L6-v2", "dim": "8"})
    (work / "base" / "base.json").write_text(json.dumps(
        {"dataset": "toyset", "openie": "openie_toyset.json", "passages": 8, "corpus_passages": 8}))
    bases, info = pg_scale.choose_bases(_args(["--dim", "8", "--base-index", str(tmp_path / "nowhere.sqlite")]),
                                        work, rng, logs.append)
    assert info["kind"] == "reused" and info["paths"] == [str(work / "base" / "index.sqlite")]
    assert "toyset" in info["vectors_from"] and "reused" in info["vectors_from"]
    assert info["vectors_from"].startswith("real all-MiniLM-L6-v2 vectors of toyset")
    with pytest.raises(ValueError, match=r"no 16-dim vectors .*\[8\] dimensions"):   # the meta says 8
        pg_scale.choose_bases(_args(["--dim", "16"]), work, rng, logs.append)


def test_build_base_indexes_the_dataset_with_its_openie_file(tmp_path):
    data = toy_openie(make_dataset(tmp_path / "data" / "toyset"))
    dest = tmp_path / "work" / "base"
    info = pg_scale.build_base(dest, data, encoder=NgramEncoder(), limit=6, log=lambda m: None)
    assert info["passages"] == 6 and info["corpus_passages"] == len(CORPUS) and info["llm_calls"] == 0
    assert info["openie"] == "openie_toyset.json" and info["encoder"] == "fake-ngram" and info["dim"] == 64
    assert info["rows"]["passage"] == 6 and info["rows"]["fact"] > 0 and not info["resumed"]
    assert json.loads((dest / "base.json").read_text()) == info
    bases, used, models = pg_scale.load_bases([dest / "index.sqlite"], 64)
    assert models == ["fake-ngram"] and len(bases["passage"][1]) == 6
    assert all(np.allclose(np.linalg.norm(bases[s][0], axis=1), 1, atol=1e-5) for s in pg_scale.STORES)
    # the next run reuses it (no child process, no encoder)
    _, chosen = pg_scale.choose_bases(_args(["--dim", "64", "--data", str(data), "--base-passages", "6"]),
                                      dest.parent, np.random.default_rng(0), lambda m: None)
    assert chosen["kind"] == "reused" and chosen["passages"] == 6 and chosen["models"] == ["fake-ngram"]
    # a base of fewer passages than it holds, or of other data, is not silently taken
    with pytest.raises(ValueError, match="holds a base of 6 passages"):
        pg_scale.make_base(dest.parent, data, 3, log=lambda m: None)
    with pytest.raises(ValueError, match="pass another --work"):
        pg_scale.make_base(dest.parent, tmp_path / "other", 6, log=lambda m: None)


def _tiny_setup(tmp_path, dim: int = 32) -> tuple[int, Path, Path]:
    """A real server needed, a base index of ``dim`` dimensions, a work folder the server's user can traverse
    (removed by the caller), the result's path."""
    require_postgres()
    _base_index(tmp_path / "base.sqlite", dim)
    work = Path(tempfile.mkdtemp(prefix="hippo-pgscale-test-"))
    if os.geteuid() == 0:
        work.chmod(0o711)
    return dim, work, tmp_path / "scale.json"


def test_tiny_run_writes_figures_projection_and_readme(tmp_path):
    dim, work, out = _tiny_setup(tmp_path)
    try:
        rc = cli_main(["pg-scale", "--passages", "120", "--batch", "60", "--dim", str(dim), "--queries", "4",
                       "--exact-queries", "2", "--work", str(work), "--base-index", str(tmp_path / "base.sqlite"),
                       "--out", str(out), "--project", "1200", "--writer-rss", "30", "--keep"])
        assert rc == 0
        first = json.loads(out.read_text())
        # the query processes again on the kept index, beside the build's figures
        rc = cli_main(["pg-scale", "--queries-only", "--work", str(work), "--out", str(out), "--queries", "3",
                       "--exact-queries", "2", "--project", "1200", "--query-modes", "engine-lazy", "engine-lazy-scan"])
        assert rc == 0
        # the exact reference in batches of 2 queries per search: the same rankings, no single-query latency
        rc = cli_main(["pg-scale", "--queries-only", "--work", str(work), "--out", str(out), "--queries", "3",
                       "--exact-queries", "2", "--project", "1200", "--query-modes", "engine-exact-ppr",
                       "--exact-batch", "2"])
        assert rc == 0
        assert cli_main(["pg-scale", "--queries-only", "--work", str(tmp_path / "none"), "--out", str(out)]) == 2
    finally:
        import shutil
        shutil.rmtree(work, ignore_errors=True)
    res = json.loads(out.read_text())
    assert res["load"] == first["load"] and res["query_reruns"][0]["queries"] == 3
    assert res["query_process"]["engine-lazy"]["queries"] == 3 and first["query_process"]["engine-lazy"]["queries"] == 4
    assert res["query_process"]["engine-lazy-scan"]["dense_prior"] == "scan"
    assert res["query_process"]["engine-exact"] == first["query_process"]["engine-exact"]      # kept, not rerun
    assert res["ranking_agreement"]["engine-lazy vs engine-exact"]["queries"] == 2     # its 2 queries
    assert res["command"].startswith("python -m reproduce pg-scale --passages 120 ")
    assert res["base"]["kind"] == "given" and res["base"]["paths"] == [str(tmp_path / "base.sqlite")]
    assert "base.sqlite" in res["vectors_from"]
    assert res["load"]["rows"] == {"passage": 120, "entity": 1032, "fact": 1080}
    assert res["load"]["vectors"] == 2232
    for s in pg_scale.QUERY_STORES:
        q = res["queries"][s]
        assert 0.5 <= q["recall_at_10"] <= 1 and q["hnsw_p50_ms"] > 0
    assert set(res["hnsw_build"]) == set(pg_scale.QUERY_STORES)
    assert res["disk"]["tables_mib"]["store_fact"] > 0
    for mode in ("engine-lazy", "engine-lazy-scan", "engine-exact-ppr", "engine-exact", "engine-memory"):
        assert "error" not in res["query_process"][mode], res["query_process"][mode]
        assert res["query_process"][mode]["peak_rss_mib"] > 0
        assert res["query_process"][mode]["graph_loaded"]        # the reader took graph.npz, no rebuild
    qp = res["query_process"]
    assert qp["engine-lazy"]["ppr_solver"] == "auto" and not qp["engine-lazy"]["uses_push"]   # a tiny graph
    assert qp["engine-exact-ppr"]["ppr_solver"] == "exact" and not qp["engine-exact-ppr"]["uses_push"]
    fast_vs_exact = res["ranking_agreement"]["engine-lazy vs engine-exact-ppr"]
    assert fast_vs_exact["queries"] == 2 and fast_vs_exact["recall_at_10"] == 1.0   # the same solver here
    assert fast_vs_exact["top10_identical"] == 1.0
    batched = qp["engine-exact-ppr"]
    assert batched["batch"] == 2 and batched["queries"] == 2 and batched["per_query_in_batches_ms"] > 0
    assert batched["query_p50_ms"] is None and "query_p50_ms" in first["query_process"]["engine-exact-ppr"]
    for action, rows in (("add", {"passage": 150, "entity": 1302, "fact": 1350}),
                         ("remove", {"passage": 120, "entity": 1032, "fact": 1080})):
        w = res["writer"][action]                                 # the engine's writer, in a fresh process
        assert "error" not in w, w
        assert w["rows_after"] == rows and not w["content_loaded"] and w["peak_rss_mib"] > 0
    p = res["projection"]
    assert p["factor"] == 10 and p["vectors"] == 22320
    readme = tmp_path / "README.md"
    pg_scale_report.main([str(out), str(readme)])
    text = readme.read_text()
    assert "Projection to 1,200 passages" in text and "recall@10" in text and "one change of 30 passages" in text
    assert res["command"] in text and "given with `--base-index`" in text


def test_resume_finishes_a_run_that_stopped_after_its_graph(tmp_path):
    dim, work, out = _tiny_setup(tmp_path)
    common = ["--dim", str(dim), "--work", str(work), "--base-index", str(tmp_path / "base.sqlite"),
              "--out", str(out), "--project", "1200", "--writer-rss", "0"]
    try:
        # a run that ends after its graph, as one killed in its HNSW builds does
        assert cli_main(["pg-scale", "--passages", "120", "--batch", "60", "--skip-queries", "--keep", *common]) == 0
        first = json.loads(out.read_text())
        assert "graph" in first and "hnsw_build" not in first
        assert cli_main(["pg-scale", "--resume", "--work", str(tmp_path / "none"), "--out", str(out)]) == 2
        rc = cli_main(["pg-scale", "--resume", "--queries", "4", "--exact-queries", "2", "--maintenance-work-mem",
                       "64MB", "--query-modes", "engine-lazy", "engine-exact-ppr", *common])
        assert rc == 0
    finally:
        import shutil
        shutil.rmtree(work, ignore_errors=True)
    res = json.loads(out.read_text())
    assert res["load"] == first["load"] and res["graph"] == first["graph"]     # kept, not redone
    assert res["resumed"][0]["kept"] == ["base", "load", "graph"]
    assert res["settings"]["maintenance_work_mem"] == "64MB"
    assert set(res["hnsw_build"]) == set(pg_scale.QUERY_STORES)
    for s in pg_scale.QUERY_STORES:
        assert 0.5 <= res["queries"][s]["recall_at_10"] <= 1
        assert res["neighbour_profile"][s]["synthetic"]["n1"] > 0
    for mode in ("engine-lazy", "engine-exact-ppr"):
        assert "error" not in res["query_process"][mode] and res["query_process"][mode]["graph_loaded"]
        assert res["query_process"][mode]["queries"] == (4 if mode == "engine-lazy" else 2)
    assert res["ranking_agreement"]["engine-lazy vs engine-exact-ppr"]["recall_at_10"] == 1.0
    assert "finished" in res


def test_memory_probe_skipped_when_its_vectors_exceed_the_memory_available():
    assert pg_scale.memory_probe_skip(1000, 384, 1024.0) is None
    why = pg_scale.memory_probe_skip(9_300_000, 384, 20 * 1024.0)
    assert why and "9,300,000 vectors" in why and "20.0 GiB of memory available" in why


def test_agreement_recall_against_the_reference_and_skipped_mode_and_placement():
    fast = [{"passages": ["a", "b", "c", "d"], "facts": [], "fallback": False},
            {"passages": ["a", "b"], "facts": [], "fallback": False}]
    exact = [{"passages": ["a", "b", "c", "e"], "facts": [], "fallback": False},
             {"passages": ["b", "a"], "facts": [], "fallback": False}]
    agree = pg_scale_report.compare_rankings({"engine-lazy": fast, "engine-exact-ppr": exact})
    a = agree["engine-lazy vs engine-exact-ppr"]
    assert a["recall_at_10"] == 0.875 and a["top10_identical"] == 0.0 and a["queries"] == 2
    lazy = {"mode": "engine-lazy", "postgres_search": "hnsw", "ppr_solver": "auto", "uses_push": True,
            "rss_after_import_mib": 100.0, "rss_after_queries_mib": 900.0, "peak_rss_mib": 1000.0,
            "retriever_s": 4.0, "query_p50_ms": 20.0,
            "retriever_memory_mib": {"passage_matrix": 100.0, "node_ids": 100.0, "graph_arrays": 100.0,
                                     "ppr_kernel": 100.0, "other": {}}}
    res = {"args": {"passages": 100_000, "entities_per_passage": 1.0, "facts_per_passage": 1.0, "dim": 8, "seed": 0,
                    "queries": 2, "exact_queries": 1, "mixture": True},
           "vectors_from": "mixture", "base_rows": {"passage": 1}, "settings": {}, "cpus": 2,
           "graph": {"build_s": 10.0, "file_mib": 200.0},
           "disk": {"tables_mib": {"store_fact": 3000.0}, "hnsw_mib": {"store_fact_hnsw": 1000.0},
                    "tables_total_mib": 3000.0},
           "hnsw_build": {"fact": {"rows": 900_000, "s": 200.0}},
           "queries": {"fact": {"exact_pg_scan_p50_ms": 400.0, "hnsw_p50_ms": 3.0}},
           "query_process": {"engine-lazy": lazy,
                             "engine-exact-ppr": {**lazy, "ppr_solver": "exact", "uses_push": False,
                                                  "query_p50_ms": 2000.0},
                             "engine-memory": {"mode": "engine-memory", "skipped": "too big for this machine"}},
           "ranking_agreement": agree}
    pg_scale_report.add_projection(res, 10_000_000)
    p = res["projection"]
    assert p["exact_ppr_query_p50_ms"] == 200_000 and p["fast_ppr_query_p50_ms_measured"] == 20.0
    text = pg_scale_report.render({k: v for k, v in res.items() if k not in ("graph", "disk", "hnsw_build", "queries")})
    assert "`engine-memory` not run: too big for this machine." in text
    assert "Where it lives at 10,000,000 passages" in text and "The graph lives in the query process" in text
    assert "needs more than an 8 GiB query host" in text and "exact PPR about 200.0 s a query" in text
    assert "| engine-lazy vs engine-exact-ppr | 2 |" in text


def test_readme_of_results_without_a_base_record():
    """Results written before the benchmark made its own base (only ``vectors_from``) still render."""
    res = {"args": {"passages": 10, "entities_per_passage": 1.0, "facts_per_passage": 1.0, "dim": 8, "seed": 0,
                    "queries": 2, "exact_queries": 1, "base_index": ["/old/index.sqlite"]},
           "vectors_from": "real all-MiniLM-L6-v2 vectors of /old/index.sqlite",
           "base_rows": {"passage": 1}, "settings": {}, "cpus": 1}
    text = pg_scale_report.render(res)
    assert "--base-index /old/index.sqlite" in text and "made outside the benchmark" in text


def test_equality_check_caches_vectors_and_names_the_parts_that_differ(tmp_path):
    from reproduce.bench.pg_scale_equal import CachedEncoder, compare
    made = []

    def make():
        made.append(NgramEncoder(dim=16))
        return made[-1]
    first = CachedEncoder(tmp_path / "v.npz", make)
    a = first.encode(["alpha", "beta", "alpha"], instruction="q: ")
    first.save()
    again = CachedEncoder(tmp_path / "v.npz", make)                 # every vector from the file: no model made
    assert np.array_equal(again.encode(["beta", "alpha"], instruction="q: "), a[[1, 0]]) and len(made) == 1
    assert (again.name, again.dim, again.misses) == (made[0].name, 16, 0)
    same = {"states": [{"passage": "x", "graph_edges": "y"}]}
    other = {"engine": "new", "states": [{"passage": "x", "graph_edges": "z"}]}
    assert compare([same, same])[0]["equal"]
    assert compare([same, other]) == [{"engine": "new", "states": [{"state": 0, "differs": ["graph_edges"]}],
                                        "equal": False}]
