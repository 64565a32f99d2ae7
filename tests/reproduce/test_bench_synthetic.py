"""The speed benchmark's synthetic corpora and stand-in embeddings (reproduce/bench/synthetic.py)."""
import numpy as np

from reproduce.bench.synthetic import DIM, LookupEncoder, SyntheticCorpus, hash_vectors


def test_hash_vectors_are_unit_and_deterministic():
    a = hash_vectors(np.array([1, 2, 3], dtype=np.uint64))
    assert a.shape == (3, DIM) and a.dtype == np.float32
    assert np.allclose(np.linalg.norm(a, axis=1), 1.0, atol=1e-5)
    assert np.array_equal(a, hash_vectors(np.array([1, 2, 3], dtype=np.uint64)))
    assert abs(float(a[0] @ a[1])) < 0.3


def test_corpus_shape_and_encoder():
    c = SyntheticCorpus(50, seed=0)
    assert len(c.passages) == 50 and c.E == 250 and len(c.triples) == 50
    assert all(len(ts) == 10 for ts in c.triples.values())
    enc = LookupEncoder(c)
    v = enc.encode(c.names[:4] + [c.passages[0]])
    assert v.shape == (5, DIM)
    assert np.allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    assert enc.encode([]).shape == (0, DIM)
    q = c.queries(5)
    assert q.shape == (5, DIM)
    assert np.array_equal(q, SyntheticCorpus(50, seed=0).queries(5))
