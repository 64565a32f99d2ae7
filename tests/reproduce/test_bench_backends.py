"""``python -m reproduce backends`` (reproduce/bench/backends.py) on a toy corpus with the n-gram
encoder: both backends indexed, compared, HNSW measured, reopened in a second process; seconds."""
import json

import pytest
from helpers import CORPUS, require_postgres, toy_openie
from toy_tables import make_dataset

from reproduce.bench import backends
from reproduce.cli import main


@pytest.fixture(scope="module")
def postgres_available():
    """Skip where the PostgreSQL extra is not installed."""
    require_postgres()


def test_backends_benchmark_on_a_toy_corpus(tmp_path, postgres_available):
    data = toy_openie(make_dataset(tmp_path / "data" / "toyset"))
    out = tmp_path / "results"
    rc = main(["backends", "--data", str(data), "--encoder", "fake", "--repeats", "1", "--hnsw-queries", "3",
               "--child-rounds", "1", "--out-dir", str(out), "--name", "toy"])
    assert rc == 0
    res = json.loads((out / "toy.json").read_text())
    n = res["same"]["questions"]
    assert n == 6
    # same vectors, same rankings and float scores on both backends
    assert res["same"]["retriever_top20_ids_and_scores"] == n
    assert res["same"]["retrieve_top20_docs_and_scores"] == n
    assert res["recall"]["sqlite"] == res["recall"]["postgres"]
    for b in backends.BACKENDS:
        assert res["index"][b]["added"] == len(CORPUS)
        assert res["disk"]["folders"][b] > 0
        assert len(res["open"][b]) == 1 and res["open"][b][0]["first_query_s"] >= 0
    assert res["open"]["sqlite"][0]["top"] == res["open"]["postgres"][0]["top"]
    # a tiny store: HNSW finds every exact neighbour
    for ns in ("fact", "passage"):
        for k in ("5", "20", "100"):
            assert res["hnsw"][ns]["k"][k]["recall"] == 1.0
    e2e = res["end_to_end"]
    # a toy index is smaller than HNSW's candidate list: the HNSW mode finds every fact, so it is exact
    assert e2e["hnsw"]["same_top20_and_scores"] == n and e2e["hnsw"]["recall"] == e2e["exact"]["recall"]
    assert e2e["hnsw"]["same_candidate_facts"] == n
    readme = (out / "README.md").read_text()
    assert "python -m reproduce backends" in readme and "| fact | " in readme and "| hnsw |" in readme
