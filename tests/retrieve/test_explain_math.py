"""Explaining PPR on a hand-built graph: every contribution equals the exact value of dense float64
linear algebra (and igraph's PRPACK answer) within 1e-9, and the walks are the most probable ones
(brute force over every simple path)."""
import math

import igraph as ig
import numpy as np
import pytest

from hippo_engine.retrieve.explain.math import Operator, contributions, exact_ppr
from hippo_engine.retrieve.explain.walks import best_walks
from hippo_engine.retrieve.ppr.kernel import PPRKernel

N_ENT, N_PAS = 22, 10          # entities 0..21, passages 22..31, nodes 32, 33 isolated
N = N_ENT + N_PAS + 2


def hand_graph(seed=3):
    """Entities in a ring with chords (fact edges), each passage linked to 2-4 entities
    (context edges), two synonymy-like light edges; two isolated nodes."""
    rng = np.random.default_rng(seed)
    edges = {}
    for i in range(N_ENT):
        edges[(i, (i + 1) % N_ENT)] = 2.0 * rng.integers(1, 3)
    for i in range(0, N_ENT, 3):
        edges[(i, (i + 7) % N_ENT)] = 2.0
    for p in range(N_PAS):
        for e in rng.choice(N_ENT, rng.integers(2, 5), replace=False).tolist():
            edges[(int(e), N_ENT + p)] = 1.0
    edges[(1, 12)] = 0.83
    edges[(4, 18)] = 0.91
    pairs = sorted((min(a, b), max(a, b), w) for (a, b), w in edges.items())
    src = np.array([p[0] for p in pairs])
    dst = np.array([p[1] for p in pairs])
    w = np.array([p[2] for p in pairs], float) + 0.01 * rng.random(len(pairs))   # no tied walks
    return src, dst, w


def reset_vector(seed=5):
    rng = np.random.default_rng(seed)
    r = np.zeros(N)
    r[[2, 9, 15]] = [0.9, 0.4, 0.25]                  # entity seeds
    r[N_ENT:N_ENT + N_PAS] = 0.05 * rng.random(N_PAS)  # passage seeds (the dense prior)
    r[N - 1] = 0.01                                    # an isolated node in the reset
    return r


@pytest.fixture(scope="module")
def setup():
    src, dst, w = hand_graph()
    return Operator.from_edges(N, src, dst, w), src, dst, w, reset_vector()


@pytest.mark.parametrize("damping", [0.5, 0.85])
def test_contributions_equal_exact_linear_algebra(setup, damping):
    op, src, dst, w, r = setup
    targets = list(range(N_ENT, N_ENT + N_PAS)) + [N - 1, N - 2]
    U = op.backward(targets, damping)
    # exact: M = (I - d P)^-1 with the isolated-node rule; term of s for t = r_s M[t, s] / sum(M r)
    inv = np.where(op.isolated, 0.0, 1.0 / np.where(op.isolated, 1.0, op.strength))
    M = np.linalg.inv(np.eye(N) - damping * op.W.toarray() * inv[None, :])
    M[op.isolated, :] = 0.0
    M[:, op.isolated] = 0.0
    M[op.isolated, op.isolated] = 1.0
    Y = float((M @ r).sum())
    x = exact_ppr(op, r, damping)
    g = ig.Graph(n=N, edges=list(zip(src.tolist(), dst.tolist(), strict=True)))
    g.es["weight"] = w.tolist()
    prpack = np.array(g.personalized_pagerank(damping=damping, weights="weight", reset=r.tolist(),
                                              implementation="prpack"))
    kernel = PPRKernel(N, src, dst, w, "float64").run(r, damping, tol=1e-14, max_iter=2000)
    for j, t in enumerate(targets):
        terms, total = contributions(op, r, U[:, j], damping)
        np.testing.assert_allclose(terms, r * M[t, :] / Y, rtol=0, atol=1e-9)
        assert abs(total - x[t]) < 1e-9
        assert abs(total - prpack[t]) < 1e-9
        assert abs(total - kernel[t]) < 1e-9
    assert abs(op.normaliser(r, damping) - Y) < 1e-9


def brute_best_walk(op, s, t, d):
    """The most probable simple walk s -> t by depth-first search over every simple path."""
    Wd = op.W.toarray()
    best = (math.inf, None)

    def dfs(a, path, cost):
        nonlocal best
        if cost >= best[0]:
            return
        if a == t:
            best = (cost, list(path))
            return
        for b in np.flatnonzero(Wd[a]).tolist():
            if b not in path:
                path.append(b)
                dfs(b, path, cost - math.log(d * Wd[a, b] / op.strength[a]))
                path.pop()

    dfs(s, [s], 0.0)
    return best


@pytest.mark.parametrize("radius", [8.0, 0.05, 1e9])
@pytest.mark.parametrize("damping", [0.5, 0.85])
def test_walks_are_the_most_probable(setup, damping, radius, monkeypatch):
    """Whatever Dijkstra's first radius (grown until the top walks are settled), the same walks."""
    import hippo_engine.retrieve.explain.walks as em
    monkeypatch.setattr(em, "WALK_RADIUS", radius)
    op, *_, r = setup
    seeds = {2: 0.9, 9: 0.4, 15: 0.25}
    U = op.backward(list(range(N_ENT, N_ENT + N_PAS)), damping)
    for j, t in enumerate(range(N_ENT, N_ENT + N_PAS)):
        walks = best_walks(op, t, seeds, damping, top=3)
        expect = []
        for s, ws in seeds.items():
            cost, path = brute_best_walk(op, s, t, damping)
            expect.append((cost - math.log(ws), s, path, math.exp(-cost)))
        expect.sort()
        assert [w.seed for w in walks] == [e[1] for e in expect]
        for walk, (_, s, path, prob) in zip(walks, expect, strict=True):
            assert walk.nodes == path
            assert abs(walk.prob - prob) < 1e-12
            assert walk.prob <= U[s, j] + 1e-12       # one walk explains at most the seed's whole term


def test_isolated_target_and_top_one(setup):
    op, *_, r = setup
    assert best_walks(op, N - 1, {2: 1.0}, 0.5) == []
    u = op.backward([N - 1], 0.5)[:, 0]
    terms, total = contributions(op, r, u, 0.5)
    assert np.count_nonzero(terms) == 1 and terms[N - 1] > 0
    assert len(best_walks(op, N_ENT, {2: 0.9, 9: 0.4, 15: 0.25}, 0.5, top=1)) == 1
