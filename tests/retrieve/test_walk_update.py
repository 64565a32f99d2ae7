"""The second walk updated from the first (retrieve/ppr/walk_update.py): on random graphs, with isolated
nodes, changed seeds of either sign and columns that did not change, the update equals a fresh solve of
the second reset within the push's bound, and an unchanged column keeps its first scores bit for bit."""
from __future__ import annotations

import numpy as np
import pytest

from hippo_engine.retrieve.ppr.kernel import PPRKernel
from hippo_engine.retrieve.ppr.push import PushPPR
from hippo_engine.retrieve.ppr.walk_update import updated_walk, walk_totals

D = 0.5


def _graph(seed: int, n: int = 60, m: int = 150, isolated: int = 3) -> PPRKernel:
    """Random weighted graph over the first ``n - isolated`` nodes; the last ``isolated`` have no edge."""
    rng = np.random.default_rng(seed)
    live = n - isolated
    src, dst = rng.integers(0, live, m), rng.integers(0, live, m)
    ring = np.arange(live)
    return PPRKernel(n, np.concatenate([src, ring]), np.concatenate([dst, (ring + 1) % live]),
                     np.concatenate([rng.uniform(0.2, 2.0, m), np.ones(live)]), "float64")


def _resets(seed: int, k: PPRKernel, passages: np.ndarray, b: int = 5) -> tuple[np.ndarray, np.ndarray]:
    """A prior on every passage plus a few entity seeds (R); R2 adds, raises, lowers or drops some
    entity seeds and one seed at an isolated node; column 0 is left unchanged."""
    rng = np.random.default_rng(seed + 1)
    R = np.zeros((k.n, b))
    R[passages] = rng.uniform(0.01, 0.05, (len(passages), b))
    entities = np.setdiff1d(np.arange(k.n), passages)
    for c in range(b):
        R[rng.choice(entities, 3, replace=False), c] = rng.uniform(0.5, 1.0, 3)
    R2 = R.copy()
    for c in range(1, b):
        R2[rng.choice(entities, 2, replace=False), c] += rng.uniform(-0.4, 0.6, 2)
    R2 = np.maximum(R2, 0.0)
    R2[k.n - 1, b - 1] += 0.3                       # a seed at an isolated node
    return R, R2


@pytest.mark.parametrize("seed", range(6))
def test_update_equals_a_fresh_walk_within_the_bound(seed):
    k = _graph(seed)
    passages = np.arange(20, 57)                    # (nodes 57-59 are isolated)
    R, R2 = _resets(seed, k, passages)
    first = k.run(R, D, 1e-14, 5000)[passages]
    want = k.run(R2, D, 1e-14, 5000)[passages]
    got = updated_walk(k, PushPPR(k), passages, first, R, R2, D, 1e-10)
    assert np.array_equal(got[:, 0], first[:, 0])   # unchanged column: its first scores exactly
    assert np.allclose(got, want, rtol=0, atol=1e-8)
    coarse = updated_walk(k, PushPPR(k), passages, first, R, R2, D, 1e-4)
    bound = D * 1e-4 * k.sqrt_strength64[passages] ** 2        # per unit of the reset's mass (module note)
    assert np.all(np.abs(coarse - want) <= bound[:, None] + 1e-9)


def test_totals_are_the_kernels_unnormalised_sums():
    k = _graph(7)
    R = np.random.default_rng(3).uniform(0, 1, (k.n, 2))
    iso = k.isolated
    y = np.linalg.solve(np.eye(k.n) - D * _transition(k), R)      # (I - d P)^-1 r on the nodes with edges
    y[iso] = R[iso]
    assert np.allclose(walk_totals(k, R, D), y.sum(axis=0))


def _transition(k: PPRKernel) -> np.ndarray:
    """P = W D^-1 of the kernel (isolated columns zero)."""
    S = k.S.toarray()
    return k.sqrt_strength64[:, None] * S * k.inv_sqrt64[None, :]


def test_a_block_without_changes_comes_back_unchanged():
    k = _graph(11)
    passages = np.arange(20, 57)
    R, _ = _resets(11, k, passages)
    first = k.run(R, D, 1e-12, 5000)[passages]
    assert np.array_equal(updated_walk(k, PushPPR(k), passages, first, R, R.copy(), D, 1e-7), first)
