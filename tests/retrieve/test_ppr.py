"""PPR kernel: agreement with igraph's exact PRPACK answer (values and top-k ranking) for both
methods and precisions, batching (bit-identical), dangling nodes, reset cleaning."""
import igraph as ig
import numpy as np
import pytest

from hippo_engine.retrieve.ppr.kernel import PPRKernel, personalized_pagerank


def random_graph(n=400, m=1500, seed=0):
    rng = np.random.default_rng(seed)
    src, dst = rng.integers(0, n - 20, m), rng.integers(0, n - 20, m)  # last 20 nodes dangling
    keep = src < dst
    pairs = sorted(set(zip(src[keep].tolist(), dst[keep].tolist(), strict=False)))
    src = np.array([p[0] for p in pairs])
    dst = np.array([p[1] for p in pairs])
    return n, src, dst, rng.random(len(src)) + 0.1


def igraph_ppr(n, src, dst, w, reset, damping):
    g = ig.Graph(n=n, edges=list(zip(src.tolist(), dst.tolist(), strict=False)))
    g.es["weight"] = w.tolist()
    return np.array(g.personalized_pagerank(damping=damping, weights="weight", reset=list(map(float, reset)),
                                            implementation="prpack"))


def resets(n, count, seed=1, dense_tail=0):
    rng = np.random.default_rng(seed)
    R = np.zeros((n, count))
    for j in range(count):
        R[rng.choice(n, 6, replace=False), j] = rng.random(6)
        if dense_tail:  # HippoRAG-like: small weights on many "passage" nodes
            R[n - dense_tail:, j] += 0.05 * rng.random(dense_tail)
    return R


@pytest.mark.parametrize("method", ["chebyshev", "power"])
@pytest.mark.parametrize("damping", [0.5, 0.85])
def test_float64_matches_igraph_prpack(method, damping):
    n, src, dst, w = random_graph()
    K = PPRKernel(n, src, dst, w, dtype="float64")
    assert K.isolated.sum() >= 20
    R = resets(n, 3)
    R[n - 3, 1] = 0.7  # a seed on a dangling node
    ours = K.run(R, damping, tol=1e-12, method=method)
    for j in range(R.shape[1]):
        ref = igraph_ppr(n, src, dst, w, R[:, j], damping)
        np.testing.assert_allclose(ours[:, j], ref, atol=1e-9)
        assert list(np.argsort(-ours[:, j], kind="stable")[:10]) == list(np.argsort(-ref, kind="stable")[:10])
        assert abs(ours[:, j].sum() - 1) < 1e-12


@pytest.mark.parametrize("method", ["chebyshev", "power"])
def test_float32_default_tolerance_keeps_top_ranking(method):
    """The default kernel (float32, L1 change < 1e-6) ranks like the exact answer."""
    n, src, dst, w = random_graph(n=2000, m=9000, seed=5)
    K = PPRKernel(n, src, dst, w)  # float32
    R = resets(n, 8, seed=4, dense_tail=600)
    ours = K.run(R, 0.5, tol=1e-6, method=method)
    for j in range(R.shape[1]):
        ref = igraph_ppr(n, src, dst, w, R[:, j], 0.5)
        assert np.abs(ours[:, j] - ref).sum() < 5e-6
        assert list(np.argsort(-ours[:, j], kind="stable")[:10]) == list(np.argsort(-ref, kind="stable")[:10])


def test_chebyshev_needs_fewer_steps_than_power():
    n, src, dst, w = random_graph(n=2000, m=9000, seed=5)
    K = PPRKernel(n, src, dst, w, dtype="float64")
    r = resets(n, 1)[:, 0]
    K.run(r, 0.5, tol=1e-8, method="power")
    power = K.last_iterations[0]
    K.run(r, 0.5, tol=1e-8, method="chebyshev")
    assert K.last_iterations[0] < 0.75 * power


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("block", [1, 4, 64])
def test_batch_is_bit_identical_to_single(dtype, block):
    n, src, dst, w = random_graph(seed=3)
    K = PPRKernel(n, src, dst, w, dtype=dtype)
    R = np.random.default_rng(2).random((n, 7))
    R[R < 0.95] = 0
    R[:, 3] = 0          # an all-zero column: uniform reset
    tol = 1e-6 if dtype == "float32" else 1e-11
    batch = K.run(R, tol=tol, block_size=block)
    iters = list(K.last_iterations)
    for j in range(R.shape[1]):
        assert np.array_equal(batch[:, j], K.run(R[:, j], tol=tol))
        assert K.last_iterations == [iters[j]]
    # and in another order / another batch composition
    again = K.run(R[:, ::-1], tol=tol, block_size=3)
    assert np.array_equal(again[:, ::-1], batch)


def test_reset_cleaning():
    n, src, dst, w = random_graph(n=50, m=100)
    reset = np.zeros(n)
    reset[3] = np.nan
    reset[4] = -1
    x = personalized_pagerank(n, src, dst, w, reset)  # all invalid -> uniform reset
    assert abs(x.sum() - 1) < 1e-12 and np.all(x >= 0)


def test_duplicate_pairs_and_self_loops():
    # repeated pairs add up; self-loops are ignored
    n = 5
    src, dst, w = np.array([0, 0, 1, 2, 3]), np.array([1, 1, 2, 3, 3]), np.array([1.0, 2.0, 1.0, 1.0, 5.0])
    x = personalized_pagerank(n, src, dst, w, np.eye(n)[0], tol=1e-13, dtype="float64")
    ref = igraph_ppr(n, np.array([0, 1, 2]), np.array([1, 2, 3]), np.array([3.0, 1.0, 1.0]), np.eye(n)[0], 0.5)
    np.testing.assert_allclose(x, ref, atol=1e-10)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_block_product_equals_scipy_bitwise_and_restores_threads(dtype):
    """Blocks of columns go through torch's CSR kernel, single vectors through scipy's: each
    column must be bit-identical either way, and torch's thread count is left as it was."""
    import torch
    rng = np.random.default_rng(7)
    n, m = 3000, 20000
    kern = PPRKernel(n, rng.integers(0, n, m), rng.integers(0, n, m), rng.random(m) + 0.1, dtype)
    z = np.ascontiguousarray(rng.random((n, 7)).astype(dtype))
    block = kern._product(z)
    for j in range(z.shape[1]):
        assert np.array_equal(block[:, j], kern.S @ z[:, j])
    before = torch.get_num_threads()
    kern.run(rng.random((n, 5)), block_size=5)
    assert torch.get_num_threads() == before


def test_blocks_on_threads_are_bit_identical():
    n, src, dst, w = random_graph(n=2000, m=9000, seed=3)
    rng = np.random.default_rng(4)
    R = rng.random((n, 11)) * (rng.random((n, 11)) < 0.01)
    kern = PPRKernel(n, src, dst, w)
    ref = kern.run(R, block_size=1, workers=1)
    for bs, workers in ((1, 2), (3, 2), (4, 3), (16, 2)):
        assert np.array_equal(kern.run(R, block_size=bs, workers=workers), ref)
