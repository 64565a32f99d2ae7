"""FalkorDB forks once at a time: graph copies of many indexes on one server, and the append-only file's
rewrite, never overlap (two forks at once hang the server: every client then waits)."""
from __future__ import annotations

import pytest
from helpers import require_falkordb, together

from hippo_engine.config import HippoConfig
from hippo_engine.store.opening import open_index_store


def _store(tmp_path, name, storage_settings):
    config = HippoConfig(storage_backend="falkordb", show_progress=False, **storage_settings("falkordb"))
    return open_index_store(tmp_path / name, config)


def test_many_indexes_on_one_server_commit_at_once_without_a_hang(tmp_path, storage_settings):
    require_falkordb()
    stores = [_store(tmp_path, f"i{k}", storage_settings) for k in range(3)]

    def write(db, k):
        for n in range(15):
            with db.transaction():
                db.set_meta(f"n{k}", str(n))
        return "done"

    try:
        outcomes = together([lambda db=db, k=k: write(db, k) for k, db in enumerate(stores)], timeout=120)
        assert outcomes == ["done"] * 3                 # None: a writer hung; an exception: it failed
        assert [db.get_meta(f"n{k}") for k, db in enumerate(stores)] == ["14", "14", "14"]
    finally:
        for db in stores:
            db.close()


def test_the_append_only_file_is_rewritten_by_a_writer_between_copies(tmp_path, storage_settings, monkeypatch):
    require_falkordb()
    from hippo_engine.store.falkordb import graph
    db = _store(tmp_path, "grow", storage_settings)
    try:
        client = db.graph.client
        assert client.config_get("auto-aof-rewrite-percentage")["auto-aof-rewrite-percentage"] == "0"
        before = client.info("persistence")["aof_rewrites"]
        monkeypatch.setattr(graph, "REWRITE_MIN", 0)
        monkeypatch.setattr(graph, "REWRITE_GROWTH", 0.0)
        with db.transaction():
            db.set_meta("grown", "yes")
        info = client.info("persistence")
        assert info["aof_rewrites"] > before and info["aof_rewrite_in_progress"] == 0
        assert db.get_meta("grown") == "yes"
    finally:
        db.close()


@pytest.mark.parametrize("field", ["aof_rewrite_in_progress", "module_fork_in_progress"])
def test_a_copy_waits_for_a_running_fork(tmp_path, storage_settings, monkeypatch, field):
    require_falkordb()
    db = _store(tmp_path, f"w{field}", storage_settings)
    try:
        real = db.graph.client.info
        seen = {"busy": 3}

        def info(section=None, *a, **k):
            out = dict(real(section, *a, **k))
            if section == "persistence" and seen["busy"] > 0:
                seen["busy"] -= 1
                out[field] = 1
            return out

        monkeypatch.setattr(db.graph.client, "info", info)
        with db.transaction():
            db.set_meta("after", "fork")
        assert seen["busy"] == 0 and db.get_meta("after") == "fork"
    finally:
        db.close()
