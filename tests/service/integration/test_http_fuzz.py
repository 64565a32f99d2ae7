"""A small ``serve-fuzz`` pass on the real memory (the sample corpus, extractor ``ner``, the packaged
embedder, the scripted reader), through uvicorn on 127.0.0.1 with an access key: every operation of the
OpenAPI schema, no server error, no response that breaks its schema, no schema-breaking request accepted.
The full run is ``python -m reproduce serve-fuzz`` (reproduce/results/serve/fuzz.md)."""
import pytest

pytest.importorskip("schemathesis")
pytest.importorskip("uvicorn", reason="the server extra")

from reproduce.serve_common import sample_service  # noqa: E402
from reproduce.serve_fuzz import KEY, fuzz  # noqa: E402


def test_a_small_fuzz_pass_on_the_real_memory(tmp_path):
    with sample_service(tmp_path / "memory", access_key=KEY) as (url, memory):
        report = fuzz(url, headers={"X-API-Key": KEY}, positive=4, negative=3, seed=5, log=lambda s: None)
        assert memory.stats()["graph"]["passage_nodes"] >= 14     # the sample is there (and fuzzed adds, maybe)
    failures = [f for row in report["per_operation"].values() for f in row["failures"]]
    assert report["operations"] >= 30 and report["requests"] >= 150
    assert report["server_errors"] == 0 and report["schema_failures"] == 0, failures[:3]
    assert not failures, failures[:3]
    assert {"200", "202", "401", "404", "422"} <= set(report["statuses"])
