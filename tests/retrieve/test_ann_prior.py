"""The dense prior from an ANN search (retrieve/ppr/ann_prior.py) and the push's treatment of it
(retrieve/ppr/push_ann.py): exact scores at the head, the exact mean, the bound at every passage, the top
of the ranking as with the scanned prior. The store here answers exactly (a unit-test stand-in for
PostgreSQL's HNSW index; tests/store/test_postgres_ann_prior.py runs the real one)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hippo_engine.retrieve.facts.seeding import reset_matrix_from_seeds
from hippo_engine.retrieve.ppr.ann_prior import AnnDense
from hippo_engine.retrieve.ppr.push import PushPPR
from hippo_engine.retrieve.ppr.push_ann import run_seed_table
from hippo_engine.retrieve.scoring import dense_column, min_max
from tests.retrieve.test_push import D, exact_pi, random_graph

W = 0.05


class ExactStore:
    """``extremes``/``nearest_ids``/``rows_of`` of a lazy store, answered by a full scan (ties by id)."""

    def __init__(self, mat: np.ndarray):
        self.mat = mat
        self.ids = [f"p{i:05d}" for i in range(len(mat))]

    def extremes(self, q, k, exact, lowest=True):
        s = np.asarray(self.mat, np.float64) @ np.asarray(q, np.float64)[0]
        order = np.lexsort((np.arange(len(s)), -s))[:k]
        return [[self.ids[i] for i in order]], s[order][None, :], np.array([s.min()])

    def nearest_ids(self, q, k):
        return self.extremes(np.asarray(q)[None, :], k, True)[0][0]

    def rows_of(self, keys):
        return np.array([int(k[1:]) for k in keys], np.int64)


def unit_rows(rng, n: int, d: int = 16) -> np.ndarray:
    m = rng.normal(size=(n, d)).astype(np.float32)
    return (m / np.linalg.norm(m, axis=1, keepdims=True)).astype(np.float16)


def test_column_is_exact_at_the_head_and_keeps_the_mean():
    rng = np.random.default_rng(1)
    mat = unit_rows(rng, 3000)
    q = rng.normal(size=16).astype(np.float32)
    q /= np.linalg.norm(q)
    ann = AnnDense(ExactStore(mat), mat, W)
    col, prior = ann.column(q, 100, 10)
    full = dense_column(mat, q)
    head = np.argsort(-full, kind="stable")[:100]
    assert np.array_equal(col[head], full[head])            # the scan's own scores at the head
    assert col.min() == full.min() and col.max() == full.max()
    assert abs(col.astype(np.float64).mean() - full.astype(np.float64).mean()) < 1e-6
    assert prior.cap == pytest.approx(float(full[head[-1]]))
    rows = rng.integers(0, 3000, 50)
    want = W * (min_max(full)[rows] - min_max(col)[rows])
    np.testing.assert_allclose(prior.delta(rows, prior.known_mask(3000)), want, atol=1e-7)


def _case(seed: int, n_ent: int, n_pas: int):
    n = n_ent + n_pas
    k = random_graph(seed, n, 3 * n)
    rng = np.random.default_rng(seed + 5)
    mat = unit_rows(rng, n_pas)
    q = rng.normal(size=16).astype(np.float32)
    q /= np.linalg.norm(q)
    r = np.zeros(n)
    r[rng.integers(0, n_ent, 3)] = rng.uniform(0.2, 1.0, 3)
    return k, mat, q, r, np.arange(n_ent, n)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), n_ent=st.integers(10, 60), n_pas=st.integers(20, 80),
       head=st.integers(1, 12), want=st.integers(1, 10), r_max=st.sampled_from([1e-3, 1e-5]))
def test_ann_prior_within_bound(seed, n_ent, n_pas, head, want, r_max):
    """With the prior known at the head only, every passage stays within the stated bound of the
    exact PPR of the true reset (the scanned prior)."""
    k, mat, q, r, passages = _case(seed, n_ent, n_pas)
    got = AnnDense(ExactStore(mat), mat, W).column(q, head, want)
    if got is None:
        return
    col, prior = got
    r_true, r_ann = r.copy(), r.copy()
    r_true[passages] = W * min_max(dense_column(mat, q))
    r_ann[passages] = W * min_max(col)
    pusher = PushPPR(k)
    scores, bound = pusher.run_split(r_ann, passages, D, r_max, head, exact_prior=prior)
    pi = exact_pi(k, r_true / r_true.sum())[passages]
    strength = (k.sqrt_strength64 ** 2)[passages]
    assert np.all(np.abs(pi - scores * pusher.last_sum) <= bound * strength + 1e-6)


def test_top10_as_with_the_scanned_prior():
    """HippoRAG 2 shaped resets on a 6,000-node graph: the top 10 with the ANN prior (head 100)
    against the exact kernel on the true reset, and against the push on the scanned prior."""
    k = random_graph(11, 6000, 18000)
    pusher = PushPPR(k)
    passages = np.arange(3000, 6000)
    rng = np.random.default_rng(12)
    mat = unit_rows(rng, 3000)
    ann = AnnDense(ExactStore(mat), mat, W)
    recall_exact = recall_scan = 0.0
    for _ in range(20):
        q = (mat[rng.integers(0, 3000)].astype(np.float32) + 0.5 * rng.normal(size=16)).astype(np.float32)
        q /= np.linalg.norm(q)
        r = np.zeros(6000)
        r[rng.integers(0, 3000, 6)] = rng.uniform(0.2, 1.0, 6)
        r_true, r_ann = r.copy(), r.copy()
        r_true[passages] = W * min_max(dense_column(mat, q))
        col, prior = ann.column(q, 100, 10)
        r_ann[passages] = W * min_max(col)
        exact = k.run(r_true, D, 1e-10, 500)[passages]
        scan, _ = pusher.run_split(r_true, passages, D, 1e-5, 100)
        fast, _ = pusher.run_split(r_ann, passages, D, 1e-5, 100, exact_prior=prior)
        top, got = (set(np.argsort(-x, kind="stable")[:10]) for x in (exact, fast))
        recall_exact += len(top & got) / 200
        recall_scan += len(set(np.argsort(-scan, kind="stable")[:10]) & got) / 200
    assert recall_exact >= 0.97
    assert recall_scan >= 0.97


def test_too_small_a_store_falls_back_to_the_scan():
    rng = np.random.default_rng(3)
    mat = unit_rows(rng, 12)
    assert AnnDense(ExactStore(mat), mat, W).column(rng.normal(size=16), 100, 10) is None


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), n_ent=st.integers(10, 60), n_pas=st.integers(20, 80),
       head=st.integers(1, 12), cols=st.integers(1, 3))
def test_seed_table_walk_equals_the_reset_matrix_walk(seed, n_ent, n_pas, head, cols):
    """``run_seed_table`` (seeds and the index's prior, no reset matrix) gives exactly what
    ``run_split`` gives on the reset matrix of the same seeds and dense columns, column by column;
    ``AnnPrior.weights`` equals the passage seeds of the column it came with."""
    k, mat, q, _, passages = _case(seed, n_ent, n_pas)
    rng = np.random.default_rng(seed)
    ann = AnnDense(ExactStore(mat), mat, W)
    got = [ann.column(q if c == 0 else (q + 0.3 * rng.normal(size=16)).astype(np.float32), head, 5)
           for c in range(cols)]
    if any(g is None for g in got):
        return
    dense = np.column_stack([g[0] for g in got])
    priors = [g[1] for g in got]
    sq = np.repeat(np.arange(cols), 3)
    sn = np.concatenate([rng.choice(n_ent, 3, replace=False) for _ in range(cols)])
    sw = rng.uniform(0.0, 1.0, len(sn))
    sw[0] = 0.0                                     # a zero seed is no seed in the matrix either
    table = (sq, sn, sw)
    R, _ = reset_matrix_from_seeds(table, dense, np.arange(cols), passages, n_ent + n_pas, W)
    for c, prior in enumerate(priors):
        assert np.array_equal(prior.weights(n_pas), R[passages, c])
    pusher = PushPPR(k)
    want = np.column_stack([pusher.run_split(R[:, c], passages, D, 1e-5, head, exact_prior=priors[c])[0]
                            for c in range(cols)])
    assert np.array_equal(run_seed_table(pusher, table, priors, passages, D, 1e-5, head), want)
