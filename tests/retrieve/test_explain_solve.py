"""The backward solver of explanations (retrieve/explain/solve.py): whatever is eliminated, every row
equals dense float64 linear algebra within the stated tolerance; the reduced system keeps the
invariant the Chebyshev weights rely on."""
import numpy as np
import pytest

import hippo_engine.retrieve.explain.solve as es
from hippo_engine.retrieve.explain.math import BACKWARD_TOL, Operator


def mixed_graph(seed=1):
    """A random core of 30 nodes with chains of 1-5 degree-2 nodes between core nodes (eliminated
    over several rounds), a star of 10 leaves, a separate path and a triangle (eliminated
    entirely) and two isolated nodes."""
    rng = np.random.default_rng(seed)
    edges = []
    for i in range(30):
        edges += [(i, int(j), rng.uniform(0.5, 3.0)) for j in rng.choice(30, 3, replace=False) if j != i]
    nxt = 30
    for _ in range(12):
        a, b = rng.choice(30, 2, replace=False).tolist()
        for _ in range(int(rng.integers(1, 6))):
            edges.append((a, nxt, rng.uniform(0.5, 3.0)))
            a, nxt = nxt, nxt + 1
        edges.append((a, b, rng.uniform(0.5, 3.0)))
    hub = nxt
    edges.append((0, hub, 1.0))
    edges += [(hub, hub + 1 + i, rng.uniform(0.5, 3.0)) for i in range(10)]
    nxt = hub + 11
    edges += [(nxt, nxt + 1, 1.0), (nxt + 1, nxt + 2, 2.0), (nxt + 2, nxt + 3, 3.0)]
    edges += [(nxt + 4, nxt + 5, 1.0), (nxt + 5, nxt + 6, 2.0), (nxt + 4, nxt + 6, 0.5)]
    n = nxt + 9                                       # nxt + 7, nxt + 8 isolated
    src, dst, w = (np.array(x) for x in zip(*edges, strict=True))
    return Operator.from_edges(n, src, dst, w)


def exact_inverse(op, d):
    """(I - d P)^-1 with P = W D^-1 and the isolated-node rule, by dense linear algebra."""
    inv = np.where(op.isolated, 0.0, 1.0 / np.where(op.isolated, 1.0, op.strength))
    M = np.linalg.inv(np.eye(op.n) - d * op.W.toarray() * inv[None, :])
    M[op.isolated, :] = 0.0
    M[:, op.isolated] = 0.0
    M[op.isolated, op.isolated] = 1.0
    return M


@pytest.mark.parametrize("damping", [0.5, 0.85])
@pytest.mark.parametrize("max_degree", [0, 2, 8, 100])
def test_rows_equal_dense_linear_algebra(damping, max_degree):
    op = mixed_graph()
    solver = es.BackwardSolver(op.W, op.strength, op.isolated, damping, max_degree)
    M = exact_inverse(op, damping)
    targets = list(range(op.n)) + [5, 5]              # every node (eliminated, core, isolated), a repeat
    U = solver.solve(targets, BACKWARD_TOL)
    assert U.shape == (op.n, len(targets))
    for j, t in enumerate(targets):
        assert np.abs(U[:, j] - M[t, :]).max() <= BACKWARD_TOL
    assert solver.solve([], BACKWARD_TOL).shape == (op.n, 0)


def test_elimination_removes_the_low_degree_nodes_and_keeps_the_invariant():
    op = mixed_graph()
    d = 0.5
    solver = es.BackwardSolver(op.W, op.strength, op.isolated, d, 8)
    assert len(solver.rounds) >= 2
    assert len(solver.core) < 30                      # chains, star, path and triangle all gone
    assert not op.isolated[solver.core].any()
    S = solver.core_step.toarray()
    assert (S >= 0).all() and S.sum(axis=1).max() <= d + 1e-12       # Jacobi row sums <= d
    A = S * solver.core_diag[:, None]                 # diag' x (diag'^-1 N') = N' is symmetric
    np.testing.assert_allclose(A, A.T, rtol=0, atol=1e-12)
    plain = es.BackwardSolver(op.W, op.strength, op.isolated, d, 0)
    assert not plain.rounds and len(plain.core) == op.n - int(op.isolated.sum())


def test_growth_guard_stops_elimination(monkeypatch):
    """A round that would grow the work is not applied (here: any round); the rows stay exact."""
    monkeypatch.setattr(es, "GROWTH", 0.0)
    op = mixed_graph(seed=4)
    solver = es.BackwardSolver(op.W, op.strength, op.isolated, 0.5, 8)
    assert not solver.rounds
    M = exact_inverse(op, 0.5)
    U = solver.solve([0, 40, op.n - 1], BACKWARD_TOL)
    for j, t in enumerate([0, 40, op.n - 1]):
        assert np.abs(U[:, j] - M[t, :]).max() <= BACKWARD_TOL


def test_operator_backward_uses_the_cached_solver():
    op = mixed_graph(seed=2)
    U = op.backward([3, 31], 0.5)
    assert op.solver(0.5) is op.solver(0.5)
    M = exact_inverse(op, 0.5)
    assert np.abs(U[:, 0] - M[3]).max() <= BACKWARD_TOL and np.abs(U[:, 1] - M[31]).max() <= BACKWARD_TOL
