"""Synonymy kNN: blocked/symmetric search equals brute force, incremental updates equal a
recomputation from scratch, neighbour caps and tie order."""
import numpy as np
import pytest

import hippo_engine.index.synonymy as syn
from hippo_engine.index.synonymy import pairs_above, rows_of, top_lists, update_synonymy


def clustered(n=300, dim=24, seed=0):
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((n // 6, dim))
    v = centres[rng.integers(0, len(centres), n)] + 0.35 * rng.standard_normal((n, dim))
    v[5] = v[4]  # an exact duplicate: a score tie
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    return v.astype(np.float32)


def brute(mat, rows, thr):
    m64 = mat.astype(np.float64)
    out = set()
    for q in rows:
        s = m64 @ m64[q]
        for k in np.flatnonzero(s >= thr):
            if k != q:
                out.add((int(q), int(k)))
    return out


@pytest.mark.parametrize("block", [7, 64, 4096])
@pytest.mark.parametrize("subset", [False, True])
def test_pairs_above_equals_brute_force(monkeypatch, block, subset):
    monkeypatch.setattr(syn, "BLOCK_ELEMENTS", 500)  # small key blocks too
    mat = clustered()
    rows = np.arange(len(mat)) if not subset else np.random.default_rng(1).choice(len(mat), 40, replace=False)
    q, k, s = pairs_above(mat, rows, 0.8, block)
    got = set(zip(q.tolist(), k.tolist(), strict=False))
    assert got == brute(mat, rows, 0.8)
    assert len(got) == len(q)                     # no pair twice
    assert set(q.tolist()) <= set(rows.tolist())
    # a pair's score is the same whichever side asked
    score = dict(zip(zip(q.tolist(), k.tolist(), strict=False), s.tolist(), strict=False))
    for (a, b), v in score.items():
        if (b, a) in score:
            assert score[(b, a)] == v
        assert v == syn.exact_scores(mat, np.array([a]), np.array([b]))[0]


def test_top_lists_order_and_cap():
    ids = np.array(["a", "b", "c", "d"], dtype=object)
    q = np.array([0, 0, 0, 1])
    k = np.array([3, 1, 2, 0])
    s = np.array([0.9, 0.95, 0.9, 0.8])
    out = top_lists(q, k, s, ids, 2)
    assert list(out["a"].items()) == [("b", 0.95), ("c", 0.9)]   # tie 0.9: lower id first
    assert out["b"] == {"a": 0.8}
    assert list(rows_of(ids, ["d", "x", "a"])) == [0, 3]


def scratch(ids, mat, eligible, cap, thr=0.8):
    q, k, s = pairs_above(mat, np.flatnonzero(eligible), thr)
    return top_lists(q, k, s, ids, cap)


def apply(lists, changed):
    for key, v in changed.items():
        if v:
            lists[key] = v
        else:
            lists.pop(key, None)


@pytest.mark.parametrize("cap", [2, 100])
def test_incremental_add_and_remove_equal_scratch(cap):
    mat_all = clustered(n=240, seed=3)
    ids_all = np.array([f"entity-{i:04d}" for i in range(len(mat_all))], dtype=object)
    eligible_all = np.ones(len(ids_all), bool)
    eligible_all[::17] = False                     # short names: never queries
    rng = np.random.default_rng(4)
    order = rng.permutation(len(ids_all))
    present = np.zeros(len(ids_all), bool)
    lists: dict = {}
    for chunk in np.array_split(order, 4):
        before = present.copy()
        present[chunk] = True
        ids, mat, el = ids_all[present], mat_all[present], eligible_all[present]
        changed = update_synonymy(lists, ids, mat, el, ids_all[chunk], (), threshold=0.8, max_neighbors=cap,
                                  block_size=16)
        apply(lists, changed)
        assert lists == scratch(ids, mat, el, cap)
        assert not (set(changed) - set(ids_all[present & ~before]) - set(lists))
    # remove a third
    gone = order[:80]
    present[gone] = False
    ids, mat, el = ids_all[present], mat_all[present], eligible_all[present]
    changed = update_synonymy(lists, ids, mat, el, (), ids_all[gone], threshold=0.8, max_neighbors=cap)
    apply(lists, changed)
    assert lists == scratch(ids, mat, el, cap)


@pytest.mark.parametrize("block_rows", [5, 64, 1000])
@pytest.mark.parametrize("subset", [False, True])
def test_streamed_pairs_equal_pairs_above(monkeypatch, block_rows, subset):
    """The writer without the matrix: pairs from blocks streamed in row order are the same pairs
    with bit-identical scores (any block size, query rows in several chunks)."""
    monkeypatch.setattr(syn, "STREAM_QUERY_ROWS", 13)
    mat = clustered()
    rows = np.arange(len(mat)) if not subset else np.sort(np.random.default_rng(1).choice(len(mat), 40, replace=False))
    blocks = [(s, mat[s:s + block_rows]) for s in range(0, len(mat), block_rows)]
    q, k, s = syn.streamed_pairs(rows, mat[rows], blocks, 0.8)
    q2, k2, s2 = pairs_above(mat, rows, 0.8, 16)
    got = dict(zip(zip(q.tolist(), k.tolist(), strict=True), s.tolist(), strict=True))
    want = dict(zip(zip(q2.tolist(), k2.tolist(), strict=True), s2.tolist(), strict=True))
    assert got == want and len(got) == len(q)


def test_incremental_add_and_remove_with_streamed_pairs_equal_scratch():
    mat_all = clustered(n=240, seed=5)
    ids_all = np.array([f"entity-{i:04d}" for i in range(len(mat_all))], dtype=object)
    eligible_all = np.ones(len(ids_all), bool)
    eligible_all[::13] = False
    order = np.random.default_rng(6).permutation(len(ids_all))
    present = np.zeros(len(ids_all), bool)
    lists: dict = {}

    def step(added, removed):
        ids, mat, el = ids_all[present], mat_all[present], eligible_all[present]
        blocks = [(s, mat[s:s + 50]) for s in range(0, len(mat), 50)]
        changed = update_synonymy(lists, ids, None, el, added, removed, threshold=0.8, max_neighbors=3,
                                  pairs=lambda r: syn.streamed_pairs(r, mat[r], blocks, 0.8))
        apply(lists, changed)
        assert lists == scratch(ids, mat, el, 3)
    for chunk in np.array_split(order, 3):
        present[chunk] = True
        step(ids_all[chunk], ())
    present[order[:70]] = False
    step((), ids_all[order[:70]])
