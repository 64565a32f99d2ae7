"""Most probable walks (retrieve/explain/walks.py): the bidirectional search with cost floors from the
backward rows gives the walks of an unlimited one-sided Dijkstra, whatever its first radius, one
target at a time or sharing the seeds' searches."""
import math

import numpy as np
import pytest
from scipy.sparse.csgraph import dijkstra
from test_explain_solve import mixed_graph

import hippo_engine.retrieve.explain.walks as ew


def reference(op, target, seeds, d, top=3):
    """(seed, nodes, probability) of the top walks by an unlimited Dijkstra from the target."""
    dist, pred = dijkstra(ew.walk_costs(op, d), indices=target, return_predecessors=True)
    ranked = sorted((dist[s] - math.log(w), s) for s, w in seeds.items()
                    if w > 0 and s != target and np.isfinite(dist[s]))
    out = []
    for _, s in ranked[:top]:
        nodes = [s]
        while nodes[-1] != target:
            nodes.append(int(pred[nodes[-1]]))
        out.append((s, nodes, math.exp(-dist[s])))
    return out


def same(walks, ref):
    assert [(w.seed, w.nodes) for w in walks] == [(s, nodes) for s, nodes, _ in ref]
    for w, (_, _, p) in zip(walks, ref, strict=True):
        assert abs(w.prob - p) <= 1e-12 * p


SEEDS = {2: 0.9, 9: 0.4, 15: 0.25, 33: 0.7, 41: 0.05, 70: 0.3}


@pytest.mark.parametrize("margin", [0.0, 5.0, 1e4])
@pytest.mark.parametrize("first", [0.05, 8.0])
@pytest.mark.parametrize("damping", [0.5, 0.85])
def test_walks_equal_the_unlimited_search(damping, first, margin, monkeypatch):
    monkeypatch.setattr(ew, "WALK_RADIUS", first)
    monkeypatch.setattr(ew, "WALK_MARGIN", margin)
    op = mixed_graph()
    seeds = {**SEEDS, op.n - 1: 1.0}                   # an isolated seed: no walk
    targets = list(range(20, op.n))
    U = op.backward(targets, damping)
    shared = ew.WalkSearch(op, seeds, damping)
    shared.plan(targets, U)
    for j, t in enumerate(targets):
        ref = reference(op, t, seeds, damping)
        same(ew.best_walks(op, t, seeds, damping), ref)                 # no row: floors 0
        same(ew.best_walks(op, t, seeds, damping, row=U[:, j]), ref)
        same(shared.best(t, 3, U[:, j]), ref)
        for w in shared.best(t, 3, U[:, j]):
            assert w.prob <= U[w.seed, j] + 1e-12                       # a walk is part of u_s


def test_other_components_and_isolated_targets(monkeypatch):
    op = mixed_graph()
    d = 0.5
    path = [n for n in range(op.n - 9, op.n - 5)]      # the separate path component
    assert ew.best_walks(op, path[0], {2: 1.0, 9: 0.5}, d) == []
    assert ew.best_walks(op, op.n - 1, {2: 1.0}, d) == []
    walks = ew.best_walks(op, path[0], {2: 1.0, path[3]: 0.5}, d)
    assert [w.seed for w in walks] == [path[3]] and walks[0].nodes == path[::-1]
    monkeypatch.setattr(ew, "FULL_RADIUS", 1.0)        # both searches unlimited from the start
    same(ew.best_walks(op, 25, SEEDS, d), reference(op, 25, SEEDS, d))
