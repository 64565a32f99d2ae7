"""The driver side of indexing on Ray, without Ray: the precomputed encoder and extractor the single
writer commits with, the claims, the split rows' assembly, the stream of results and the merged
report. (The cluster itself: tests/index/integration/test_ray_executor.py.)"""
from __future__ import annotations

import numpy as np
import pytest
from fakes import NgramEncoder

from hippo_engine.datatypes import Extraction, Hyperedge
from hippo_engine.index.distributed import executor as ex_module
from hippo_engine.index.distributed.committer import PrecomputedEncoder, PrecomputedExtractor, merge_reports
from hippo_engine.index.distributed.worker import Claims, facts_json, read_facts
from hippo_engine.index.documents import DocumentBatch


def test_the_precomputed_encoder_serves_worker_vectors_and_encodes_only_what_is_missing():
    real = NgramEncoder()
    enc = PrecomputedEncoder("ngram", lambda: real)
    vecs = real.encode(["alpha", "beta"])
    enc.add(["alpha", "beta"], vecs.astype(np.float32).tobytes())
    got = enc.encode(["beta", "gamma", "alpha"])
    assert np.array_equal(got[0], vecs[1]) and np.array_equal(got[2], vecs[0])
    assert np.array_equal(got[1], real.encode(["gamma"])[0]) and enc.fallbacks == 1
    assert enc.dim == vecs.shape[1]
    enc.forget_served()
    assert enc.vectors == {}
    with pytest.raises(ValueError, match="floats for 2 texts"):
        enc.add(["a", "b"], np.zeros(3, np.float32).tobytes())


def test_the_precomputed_extractor_returns_the_workers_facts_and_names_the_missing():
    ex = Extraction(hyperedges={"p1": [Hyperedge("Ann met Bo.", ("Ann", "Bo"))]}, triples={"p2": [("a", "b", "c")]})
    facts = PrecomputedExtractor("ner")
    facts.add("p1", facts_json(ex, "p1"))
    facts.add("p2", facts_json(ex, "p2"))
    out = facts.extract({"p1": "x", "p2": "y", "p3": "z"})
    assert out.hyperedges == {"p1": [Hyperedge("Ann met Bo.", ("Ann", "Bo"))]}
    assert out.triples == {"p2": [("a", "b", "c")]}
    assert set(out.failed) == {"p3"}
    assert read_facts(facts_json(ex, "p2")) == ([("a", "b", "c")], None)


def test_claims_give_each_text_to_the_first_batch_and_the_same_answer_on_a_retry():
    c = Claims()
    assert c.claim("b1", ["x", "y"]) == [True, True]
    assert c.claim("b2", ["y", "z"]) == [False, True]
    assert c.claim("b1", ["x", "y"]) == [True, True]        # a retried batch keeps what it owned
    assert c.size() == 3


def test_split_rows_assemble_in_input_order_and_duplicates_collapse():
    batch = DocumentBatch(metadata={})
    rows = [{"pos": 0, "doc_id": "d1", "passages": ["A\none", "A\ntwo"]}, {"pos": 1, "doc_id": "d2", "passages": ["B"]},
            {"pos": 2, "doc_id": "d1", "passages": ["A\none", "A\ntwo"]}]
    ex_module._assemble(batch, rows, [{"u": 1}, {}, {"u": 1}])
    assert list(batch.documents) == ["d1", "d2"] and len(batch.passages) == 3 and batch.positions == {"d1": 0, "d2": 1}
    assert batch.metadata == {"d1": {"u": 1}, "d2": {}}
    with pytest.raises(ValueError, match="same text .* different metadata"):
        ex_module._assemble(DocumentBatch(metadata={}), rows, [{"u": 1}, {}, {"u": 2}])
    batch = DocumentBatch(metadata={})
    ex_module._assemble(batch, rows, [None, None, {"u": 2}])        # None: none given for that document
    assert batch.metadata == {"d1": {"u": 2}}


def test_the_stream_hands_over_everything_that_arrived_and_then_the_error():
    class Table:
        def __init__(self, rows):
            self.rows = rows

        def to_pylist(self):
            return self.rows

    class Dataset:
        def iter_batches(self, **_):
            yield Table([{"pid": "a"}])
            yield Table([{"pid": "b"}])
            raise RuntimeError("worker lost")

    stream, seen = ex_module._Stream(Dataset()), []
    with pytest.raises(RuntimeError, match="worker lost"):
        while True:
            seen.extend(r["pid"] for r in stream.next())
    assert seen == ["a", "b"]
    stream.close()


def test_reports_of_the_commits_add_up():
    a = {"added": 2, "new_entities": 3, "removed": 0, "documents": {"added": ["d1"], "replaced": [], "unchanged": 1},
         "timings": {"write_stores": 1.0}}
    b = {"added": 1, "new_entities": 1, "documents": {"added": ["d2"], "replaced": ["d3"], "unchanged": 0},
         "timings": {"write_stores": 0.5, "graph": 0.2}}
    out = merge_reports([a, b, {"added": 0}])
    assert out["added"] == 3 and out["new_entities"] == 4
    assert out["documents"] == {"added": ["d1", "d2"], "replaced": ["d3"], "unchanged": 1}
    assert out["timings"] == {"write_stores": 1.5, "graph": 0.2}


def test_executor_arguments_are_checked():
    with pytest.raises(ValueError, match="positive"):
        ex_module.RayExecutor(batch_size=0)
    with pytest.raises(ValueError, match="at least 1"):
        ex_module.RayExecutor(workers=0)
