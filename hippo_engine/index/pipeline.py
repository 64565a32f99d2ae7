"""Former home of the index state: ``Index`` is :class:`.state.IndexState` (kept as an alias for
code that imports it from here)."""
from __future__ import annotations

from hippo_engine.index.facts import normalize_hyperedges, normalize_triples  # noqa: F401 (re-exported)
from hippo_engine.index.state import Index, IndexState

__all__ = ["Index", "IndexState", "normalize_hyperedges", "normalize_triples"]
