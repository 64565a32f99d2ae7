"""An index folder records its backend and identity (``hippo-index.json``): every later open
finds the backend without being told, a different backend is refused clearly, and an SQLite file
deleted under the folder is an error, never a new empty index."""
from __future__ import annotations

import json
import os

import pytest
from helpers import CORPUS, make_rag

from hippo_engine.store.base import StoreError


def _identity(folder) -> dict:
    return json.loads((folder / "hippo-index.json").read_text())


def test_a_new_sqlite_index_records_its_identity_in_the_folder_and_the_database(tmp_path):
    from hippo_engine.store.opening import index_exists, recorded_storage
    rag = make_rag(tmp_path / "m")
    rec = _identity(tmp_path / "m")
    assert rec["backend"] == "sqlite" and rec["index_id"] == rag.index_state.db.get_meta("index_id")
    assert rag.index_state.db.get_meta("index_folder") == str((tmp_path / "m").resolve())
    rag.close()
    assert recorded_storage(tmp_path / "m")["storage_backend"] == "sqlite"
    assert recorded_storage(tmp_path / "empty") is None
    again = make_rag(tmp_path / "m")                                 # the identity stays
    assert again.index_state.db.get_meta("index_id") == rec["index_id"] == _identity(tmp_path / "m")["index_id"]
    again.close()
    assert index_exists(tmp_path / "m", None) and not index_exists(tmp_path / "empty", None)


def test_an_index_made_before_identities_gets_one_when_opened(tmp_path):
    from hippo_engine.store.opening import recorded_storage
    rag = make_rag(tmp_path / "old")
    rag.index(CORPUS[:2])
    with rag.index_state.db.transaction() as c:                        # what an older version left
        c.execute("DELETE FROM meta WHERE key IN ('index_id', 'index_folder')")
    rag.close()
    (tmp_path / "old" / "hippo-index.json").unlink()
    assert recorded_storage(tmp_path / "old") == {"storage_backend": "sqlite", "postgres_schema": None,
                                                  "server": None, "index_id": None}
    again = make_rag(tmp_path / "old")
    assert len(again.index_state) == 2
    assert _identity(tmp_path / "old")["index_id"] == again.index_state.db.get_meta("index_id") is not None
    again.close()


def test_an_sqlite_file_deleted_under_an_open_reader_is_not_replaced_by_a_new_empty_index(tmp_path):
    folder = tmp_path / "m"
    writer = make_rag(folder)
    writer.index(CORPUS[:3])
    reader = make_rag(folder)
    assert len(reader.index_state) == 3
    for name in ("index.sqlite", "index.sqlite-wal", "index.sqlite-shm"):
        if (folder / name).exists():
            os.remove(folder / name)
    with pytest.raises(StoreError, match="lost its database: .*index.sqlite is missing"):
        make_rag(folder)                                               # a new writer
    assert not (folder / "index.sqlite").exists()                      # nothing was created
    with pytest.raises(StoreError, match="deleted or replaced while this index was open"):
        writer.index(CORPUS[3:5])                                       # the open writer
    writer.close()
    reader.close()


def test_a_different_backend_than_the_recorded_one_is_refused_before_starting_anything(tmp_path):
    from hippo_engine.store.opening import open_index_store
    make_rag(tmp_path / "m").close()
    with pytest.raises(StoreError, match=r"kept in sqlite .* opened with storage 'postgres'"):
        make_rag(tmp_path / "m", storage="postgres")
    assert not (tmp_path / "m" / "postgres").exists()                  # no server was initialised
    from hippo_engine.config import HippoConfig
    (tmp_path / "m" / "hippo-index.json").write_text("{not json")
    with pytest.raises(StoreError, match="unreadable index identity"):
        open_index_store(tmp_path / "m", HippoConfig())


def test_an_embedded_postgres_index_whose_data_is_gone_is_an_error_before_any_server_starts(tmp_path):
    """The same for an embedded PostgreSQL index: no new empty cluster in place of a lost one."""
    from hippo_engine.config import HippoConfig
    from hippo_engine.store.identity import write_identity
    from hippo_engine.store.opening import open_index_store
    folder = tmp_path / "m"
    write_identity(folder, {"index_id": "1234", "backend": "postgres", "schema": "hippo", "server": "embedded"})
    with pytest.raises(StoreError, match=r"lost its database: .*postgres/PG_VERSION is missing"):
        open_index_store(folder, HippoConfig(storage_backend="postgres"))
    assert not (folder / "postgres").exists()
