"""Storage: the SQLite index database (:mod:`.db`) and the embedding stores (:mod:`.vectors`)."""
from hippo_engine.store.db import IndexDB, StoreError
from hippo_engine.store.vectors import EmbeddingStore, SQLiteEmbeddingStore

__all__ = ["EmbeddingStore", "IndexDB", "SQLiteEmbeddingStore", "StoreError"]
