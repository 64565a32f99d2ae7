"""PPR kernel: agreement with igraph's exact PRPACK answer, batching, dangling nodes."""
import igraph as ig
import numpy as np
import pytest

from hippo_engine.ppr import personalized_pagerank, transition_matrix


def random_graph(n=400, m=1500, seed=0):
    rng = np.random.default_rng(seed)
    src, dst = rng.integers(0, n - 20, m), rng.integers(0, n - 20, m)  # last 20 nodes dangling
    keep = src < dst
    pairs = sorted(set(zip(src[keep].tolist(), dst[keep].tolist())))
    src = np.array([p[0] for p in pairs]); dst = np.array([p[1] for p in pairs])
    return n, src, dst, rng.random(len(src)) + 0.1


@pytest.mark.parametrize("damping", [0.5, 0.85])
def test_matches_igraph_prpack(damping):
    n, src, dst, w = random_graph()
    P, dangling = transition_matrix(n, src, dst, w)
    assert dangling.sum() >= 20
    g = ig.Graph(n=n, edges=list(zip(src.tolist(), dst.tolist())))
    g.es["weight"] = w.tolist()
    rng = np.random.default_rng(1)
    for _ in range(3):
        reset = np.zeros(n)
        reset[rng.choice(n, 6, replace=False)] = rng.random(6)
        ours = personalized_pagerank(P, dangling, reset, damping, tol=1e-12)
        ref = np.array(g.personalized_pagerank(damping=damping, weights="weight", reset=reset.tolist(),
                                               implementation="prpack"))
        np.testing.assert_allclose(ours, ref, atol=1e-9)
        assert list(np.argsort(-ours)[:10]) == list(np.argsort(-ref)[:10])


def test_batch_is_bit_identical_to_single():
    n, src, dst, w = random_graph(seed=3)
    P, dangling = transition_matrix(n, src, dst, w)
    R = np.random.default_rng(2).random((n, 6))
    R[R < 0.95] = 0
    batch = personalized_pagerank(P, dangling, R)
    for j in range(R.shape[1]):
        assert np.array_equal(batch[:, j], personalized_pagerank(P, dangling, R[:, j]))


def test_reset_cleaning():
    n, src, dst, w = random_graph(n=50, m=100)
    P, dangling = transition_matrix(n, src, dst, w)
    reset = np.zeros(n); reset[3] = np.nan; reset[4] = -1
    x = personalized_pagerank(P, dangling, reset)  # all invalid -> uniform reset
    assert abs(x.sum() - 1) < 1e-12 and np.all(x >= 0)
