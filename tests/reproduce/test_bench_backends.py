"""``python -m reproduce backends`` (reproduce/bench/backends.py) on a toy corpus with the n-gram
encoder: SQLite and each server backend indexed, compared, measured (HNSW on PostgreSQL, disk and
memory of FalkorDB), reopened in a second process; seconds each."""
import argparse
import json

import pytest
from helpers import CORPUS, require_falkordb, require_postgres, toy_openie
from toy_tables import make_dataset

from reproduce.bench import backends
from reproduce.cli import main


@pytest.fixture(scope="module")
def postgres_available():
    """Skip where the PostgreSQL extra is not installed."""
    require_postgres()


@pytest.fixture(scope="module")
def falkordb_available():
    """Skip where the FalkorDB extra is not installed."""
    require_falkordb()


def _run(tmp_path, chosen: str) -> tuple[dict, str]:
    data = toy_openie(make_dataset(tmp_path / "data" / "toyset"))
    out = tmp_path / "results"
    rc = main(["backends", "--data", str(data), "--encoder", "fake", "--repeats", "1", "--hnsw-queries", "3",
               "--child-rounds", "1", "--out-dir", str(out), "--name", "toy", "--backends", chosen])
    assert rc == 0
    return json.loads((out / "toy.json").read_text()), (out / "README.md").read_text()


def _assert_same_as_sqlite(res: dict, other: str) -> None:
    n = res["same"]["questions"]
    assert n == 6
    # same vectors, same rankings and float scores as SQLite
    assert res["same"][other] == {"retriever_top20_ids_and_scores": n, "retrieve_top20_docs_and_scores": n}
    assert res["recall"]["sqlite"] == res["recall"][other]
    for b in ("sqlite", other):
        assert res["index"][b]["added"] == len(CORPUS)
        assert res["disk"]["folders"][b] > 0
        assert len(res["open"][b]) == 1 and res["open"][b][0]["first_query_s"] >= 0
    assert res["open"]["sqlite"][0]["top"] == res["open"][other][0]["top"]


def test_backends_benchmark_on_a_toy_corpus(tmp_path, postgres_available):
    res, readme = _run(tmp_path, "postgres")
    assert res["backends"] == ["sqlite", "postgres"]
    _assert_same_as_sqlite(res, "postgres")
    assert res["memory"]["postgres"]["processes"] >= 1 and res["memory"]["postgres"]["rss"] > 0
    # a tiny store: HNSW finds every exact neighbour
    for ns in ("fact", "passage"):
        for k in ("5", "20", "100"):
            assert res["hnsw"][ns]["k"][k]["recall"] == 1.0
    e2e = res["end_to_end"]
    # a toy index is smaller than HNSW's candidate list: the HNSW mode finds every fact, so it is exact
    assert e2e["hnsw"]["same_top20_and_scores"] == 6 and e2e["hnsw"]["recall"] == e2e["exact"]["recall"]
    assert e2e["hnsw"]["same_candidate_facts"] == 6
    assert "python -m reproduce backends" in readme and "| fact | " in readme and "| hnsw |" in readme


def test_falkordb_in_the_backends_benchmark_ranks_as_sqlite(tmp_path, falkordb_available):
    res, readme = _run(tmp_path, "falkordb")
    assert res["backends"] == ["sqlite", "falkordb"]
    _assert_same_as_sqlite(res, "falkordb")
    mem = res["memory"]["falkordb"]
    assert mem["processes"] == 1 and mem["rss"] > mem["used_memory"] > 0       # the one redis-server
    files = res["disk"]["falkordb_files"]
    assert files["append-only file"] > 0 and files["RDB snapshots"] == 0       # appendonly, no snapshots
    assert "hnsw" not in res and "| FalkorDB (embedded) |" in readme and "| hnsw |" not in readme
    assert "FalkorDB 6/6 (Retriever.search arrays)" in readme


def test_the_backends_option_keeps_sqlite_first_and_refuses_unknown_names():
    assert backends.backend_list("falkordb,postgres") == ("sqlite", "postgres", "falkordb")
    assert backends.backend_list("falkordb") == ("sqlite", "falkordb")
    with pytest.raises(argparse.ArgumentTypeError, match="neo4j"):
        backends.backend_list("neo4j")
