"""Storage: the :class:`~hippo_engine.store.base.IndexStore` interface, its backends registered by
name (:mod:`.registry`: the SQLite index database, :mod:`.db`, and PostgreSQL, :mod:`.postgres`)
and the embedding stores (:mod:`.vectors`). The names below are imported on first use, so that
importing the package (as the configuration does, for :mod:`.registry`) loads no backend."""
from __future__ import annotations

import importlib

_LAZY = {"IndexDB": "hippo_engine.store.db", "StoreError": "hippo_engine.store.base",
         "EmbeddingStore": "hippo_engine.store.vectors", "SQLiteEmbeddingStore": "hippo_engine.store.vectors"}


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["EmbeddingStore", "IndexDB", "SQLiteEmbeddingStore", "StoreError"]
