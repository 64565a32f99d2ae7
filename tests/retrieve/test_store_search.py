"""``StoreSearch`` (facts searched in the database) asks its store for the normalisation's minimum with
the configured floor search (``postgres_floor_ef_search``) and normalises by it; a store that keeps
the rows in memory stands in for the database here (the real one: tests/store/postgres/test_pg_lazy.py)."""
from __future__ import annotations

import numpy as np

from hippo_engine.retrieve.facts.fact_search import StoreSearch


class RecordingStore:
    """Three facts with fixed scores; ``extremes`` records how it was asked and gives ``low`` as the
    table's lowest score."""

    def __init__(self, low: float):
        self.ids, self.low, self.calls = ["f0", "f1", "f2"], low, []

    def __len__(self) -> int:
        return len(self.ids)

    def extremes(self, q, k, exact, lowest=True, floor_ef=None):
        self.calls.append({"k": k, "exact": exact, "lowest": lowest, "floor_ef": floor_ef})
        return [self.ids[:k]], np.array([[0.9, 0.5, 0.1][:k]]), np.array([self.low])

    def rows_of(self, keys):
        return np.array([self.ids.index(k) for k in keys], np.int64)


def test_the_floor_setting_reaches_the_store_and_its_minimum_normalises_the_scores():
    store = RecordingStore(low=-0.1)
    rows, scores = StoreSearch(store, exact=False, floor_ef=20).top_normalised(np.ones((1, 4)), 2)
    assert store.calls == [{"k": 2, "exact": False, "lowest": True, "floor_ef": 20}]
    assert rows.tolist() == [[0, 1]]
    assert np.allclose(scores, [[1.0, 0.6]])          # (s - (-0.1)) / (0.9 - (-0.1))
    StoreSearch(store, exact=False).top_normalised(np.ones((1, 4)), 2)
    assert store.calls[-1]["floor_ef"] is None         # unset: the store's own default (the top search's)


def test_nearest_ids_asks_for_no_minimum():
    store = RecordingStore(low=-0.1)
    out = StoreSearch(store, exact=True, floor_ef=20).nearest_ids(np.ones((1, 4)), 3)
    assert store.calls == [{"k": 3, "exact": True, "lowest": False, "floor_ef": None}]
    assert out[0][0] == ["f0", "f1", "f2"]
