"""A FalkorDB store node whose vector lacks its stored bytes (written by a development version of the
backend) is a clear error naming the index and the row, not a TypeError."""
from __future__ import annotations

import numpy as np
import pytest
from helpers import require_falkordb

from hippo_engine.config import HippoConfig
from hippo_engine.store.base import StoreError
from hippo_engine.store.opening import open_index_store


def test_a_vector_without_its_stored_bytes_is_a_clear_error(tmp_path, storage_settings):
    require_falkordb()
    config = HippoConfig(storage_backend="falkordb", show_progress=False, **storage_settings("falkordb"))
    db = open_index_store(tmp_path / "old", config)
    try:
        with db.transaction():
            db.vector_writer("entity", 4).upsert(["e1"], ["velor"], np.ones((1, 4), np.float32) / 2)
        with db.transaction():
            db.graph.write("drop the stored bytes", "MATCH (n:Entity) REMOVE n.vector")
        with pytest.raises(StoreError, match="'e1' has no stored bytes.*build it again"):
            db.vector_writer("entity", 4)
    finally:
        db.close()
