"""PostgresEmbeddingStore: block reads, top-k from the database (exact scan and HNSW with exact
rescoring), recall of HNSW against exact search on clustered vectors."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("psycopg")
pytest.importorskip("pgvector")

from hippo_engine.store.postgres import PostgresIndexStore  # noqa: E402
from hippo_engine.store.postgres import vectors as pgvec  # noqa: E402

DIM = 32


@pytest.fixture
def db(pg_dsn, pg_schema):
    store = PostgresIndexStore(pg_dsn, pg_schema)
    yield store
    store.close()


def clustered(n: int, centres: int, seed: int = 0) -> np.ndarray:
    """Unit vectors around a few centres (cosine to the centre about 0.7, like related texts)."""
    rng = np.random.default_rng(seed)
    c = rng.standard_normal((centres, DIM))
    c /= np.linalg.norm(c, axis=1, keepdims=True)
    x = c[rng.integers(0, centres, n)] + rng.standard_normal((n, DIM)) / np.sqrt(DIM)
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def brute_force(mat: np.ndarray, ids: np.ndarray, q: np.ndarray, k: int) -> tuple[list, np.ndarray]:
    """Top-k by score, ties by id (rows of ``mat`` sorted by id), with the store's arithmetic."""
    out_ids, out_scores = [], []
    for qv in q:
        s = np.einsum("ij,j->i", mat, qv)
        top = np.argsort(-s, kind="stable")[:k]
        out_ids.append(list(ids[top]))
        out_scores.append(s[top])
    return out_ids, np.array(out_scores)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_exact_and_hnsw_nearest_against_brute_force(db, dtype):
    n = 3000
    vecs = clustered(n, 30)
    keys = [f"fact-{i:05d}" for i in np.random.default_rng(1).permutation(n)]
    st = db.embedding_store("fact", DIM, vector_dtype=dtype)
    with db.transaction():
        st.upsert(keys, keys, vecs)
    queries = clustered(40, 30, seed=2)
    k = 10
    truth_ids, truth_scores = brute_force(st.matrix, st.ids, queries, k)

    ids, scores = st.nearest(queries, k, exact=True)
    assert ids.shape == (40, k) and scores.dtype == np.float32
    assert [list(r) for r in ids] == truth_ids                      # same rows, same order
    np.testing.assert_array_equal(scores, truth_scores)             # bit for bit

    assert not st.has_hnsw()
    st.ensure_hnsw()
    st.ensure_hnsw()                                                # idempotent
    assert st.has_hnsw()
    plan = "\n".join(r[0] for r in db.conn.execute(
        f"EXPLAIN SELECT id FROM {st.table} ORDER BY vec <#> %s LIMIT 10", (st._wrap(queries[0]),)))
    assert "store_fact_hnsw" in plan
    ids2, scores2 = st.nearest(queries, k)
    recall = np.mean([len(set(a) & set(b)) / k for a, b in zip(ids2, truth_ids, strict=True)])
    assert recall >= 0.95, recall
    for row_i, row_s, t_i, t_s in zip(ids2, scores2, truth_ids, truth_scores, strict=True):
        assert list(row_s) == sorted(row_s, reverse=True)           # best first
        truth = dict(zip(t_i, t_s, strict=True))
        for i, s in zip(row_i, row_s, strict=True):
            if i in truth:
                assert s == truth[i]                                # exact rescoring: the same score


def test_nearest_edge_cases(db):
    st = db.embedding_store("entity", DIM)
    ids, scores = st.nearest(np.ones(DIM, np.float32), 5, exact=True)
    assert ids.shape == (1, 0) and scores.shape == (1, 0)
    ids, scores = st.nearest(np.ones(DIM, np.float32), 5)
    assert ids.shape == (1, 0)
    vecs = clustered(3, 1)
    st.upsert(["b", "a", "c"], ["b", "a", "c"], vecs)
    for exact in (True, False):
        ids, scores = st.nearest(vecs[:2], 10, exact=exact)          # k larger than the store
        assert ids.shape == (2, 3) and ids[0, 0] == "b" and ids[1, 0] == "a"
        ids, _ = st.nearest(vecs[:2], 0, exact=exact)
        assert ids.shape == (2, 0)
    with pytest.raises(ValueError, match="dimensions"):
        st.nearest(np.ones(DIM + 1, np.float32), 1)


def test_nearest_sees_the_database_not_the_mirror(pg_dsn, pg_schema, db):
    st = db.embedding_store("passage", DIM)
    other = PostgresIndexStore(pg_dsn, pg_schema)
    try:
        vecs = clustered(2, 1)
        other.embedding_store("passage", DIM).upsert(["p-new"], ["new"], vecs[:1])
        assert "p-new" not in st                                    # the mirror is as it was loaded
        ids, _ = st.nearest(vecs[:1], 1, exact=True)
        assert ids[0, 0] == "p-new"
    finally:
        other.close()


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_blocks_of_any_size_read_the_same_matrix(db, monkeypatch, dtype):
    vecs = clustered(500, 5)
    keys = [f"k{i:04d}" for i in range(500)]
    st = db.embedding_store("entity", DIM, vector_dtype=dtype)
    st.upsert(keys, keys, vecs)
    whole = db.embedding_store("entity", DIM).matrix
    row_bytes = 10 + DIM * np.dtype(dtype).itemsize
    for block in (1, row_bytes - 1, row_bytes + 1, 7 * row_bytes):   # blocks cut rows and the header
        monkeypatch.setattr(pgvec, "BLOCK_BYTES", block)
        np.testing.assert_array_equal(db.embedding_store("entity", DIM).matrix, whole)
    monkeypatch.setattr(pgvec, "BLOCK_BYTES", 3 * row_bytes)
    ids, _ = st.nearest(vecs[:3], 4, exact=True)
    assert list(ids[:, 0]) == keys[:3]
