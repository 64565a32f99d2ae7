"""Two index folders never share a PostgreSQL schema by accident: on a server given by a DSN the
default schema is unique per folder, an index has an identity (in its folder and its schema), a
schema holding another folder's index is refused unless named explicitly, an index made before
identities keeps its old schema, and a folder's recorded backend is found without --storage."""
from __future__ import annotations

import json
import uuid

import pytest
from helpers import CORPUS, make_rag

from hippo_engine import HippoRAG
from hippo_engine.store.base import StoreError


@pytest.fixture
def schemas(pg_dsn):
    """Schemas a test makes on the session server (dropped afterwards)."""
    import psycopg
    made: list[str] = []
    yield made
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        for name in set(made):
            conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


def _open(folder, dsn, schemas, **kw):
    rag = make_rag(folder, storage_backend="postgres", postgres_dsn=dsn, use_filter=False, **kw)
    schemas.append(rag.index_state.db.schema)
    return rag


def _identity(folder) -> dict:
    return json.loads((folder / "hippo-index.json").read_text())


@pytest.mark.parametrize("names", [("记忆", "メモリ"), ("memory", "memory"), ("My Memory", "my-memory")])
def test_folders_whose_names_collapse_alike_get_schemas_of_their_own(tmp_path, pg_dsn, schemas, names):
    a = _open(tmp_path / "a" / names[0], pg_dsn, schemas)
    b = _open(tmp_path / "b" / names[1], pg_dsn, schemas)
    assert a.index_state.db.schema != b.index_state.db.schema
    a.index(CORPUS[:2], ids=["a0", "a1"])
    b.index(CORPUS[2:5], ids=["a0", "b1", "b2"])
    assert len(a.index_state) == 2 and len(b.index_state) == 3         # neither sees the other's documents
    b.delete(ids=["a0"])
    again = _open(tmp_path / "a" / names[0], pg_dsn, schemas)          # A's documents are all there
    assert len(again.index_state) == 2 and again.index_state.db.document_passages(["a0"])
    for rag in (a, b, again):
        rag.close()


def test_the_identity_is_written_in_the_folder_and_the_schema_without_the_password(tmp_path, pg_dsn, schemas):
    dsn = f"{pg_dsn} password=hunter2-not-needed"                    # the socket trusts: the password is unused
    rag = _open(tmp_path / "m", dsn, schemas)
    db = rag.index_state.db
    rec = _identity(tmp_path / "m")
    assert rec["index_id"] == db.get_meta("index_id") and rec["backend"] == "postgres"
    assert rec["schema"] == db.schema and db.schema.startswith("hippo_m_") and len(db.schema) == len("hippo_m_") + 8
    assert db.get_meta("index_folder") == str((tmp_path / "m").resolve())
    assert "hunter2" not in (tmp_path / "m" / "hippo-index.json").read_text()
    rag.close()
    moved = tmp_path / "moved"
    (tmp_path / "m").rename(moved)                                     # the recorded schema follows the folder
    rag = _open(moved, pg_dsn, schemas)
    assert rag.index_state.db.schema == rec["schema"]
    rag.close()


def test_a_schema_holding_another_folders_index_is_refused_unless_named(tmp_path, pg_dsn, schemas):
    a = _open(tmp_path / "a", pg_dsn, schemas)
    a.index(CORPUS[:2])
    b = _open(tmp_path / "b", pg_dsn, schemas)
    b.close()
    rec = _identity(tmp_path / "b")
    rec["schema"] = a.index_state.db.schema                           # b's record points at a's schema
    (tmp_path / "b" / "hippo-index.json").write_text(json.dumps(rec))
    with pytest.raises(StoreError, match=r"holds the index of another folder \(.*/a, index id .*\), not the index "
                                         r"of .*/b \(index id .*postgres_schema="):
        _open(tmp_path / "b", pg_dsn, schemas)
    shared = _open(tmp_path / "b", pg_dsn, schemas, postgres_schema=a.index_state.db.schema)   # on purpose
    assert len(shared.index_state) == 2
    assert _identity(tmp_path / "b")["schema"] == a.index_state.db.schema   # the explicit open kept b's record
    for rag in (a, shared):
        rag.close()


def test_an_index_in_the_old_default_schema_keeps_opening(tmp_path, pg_dsn, schemas):
    import psycopg

    from hippo_engine.store.opening import legacy_schema
    name = f"mem_{uuid.uuid4().hex[:8]}"
    old, twin, fresh = tmp_path / "x" / name, tmp_path / "y" / name, tmp_path / "z" / name
    legacy = legacy_schema(old)
    rag = _open(old, pg_dsn, schemas, postgres_schema=legacy)         # what an older version made
    rag.index(CORPUS[:3])
    rag.close()
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f"DELETE FROM \"{legacy}\".meta WHERE key IN ('index_id', 'index_folder')")
    (old / "hippo-index.json").unlink()
    rag = _open(old, pg_dsn, schemas)                                  # no schema given: the old one is used
    assert rag.index_state.db.schema == legacy and len(rag.index_state) == 3
    assert _identity(old)["schema"] == legacy
    rag.close()
    twin.mkdir(parents=True)
    (twin / "openie_results.json").write_text("{}")                   # a folder that had an index of its own
    with pytest.raises(StoreError, match=rf"schema {legacy} .* holds the index of another folder \(.*/x/{name}"):
        _open(twin, pg_dsn, schemas)
    new = _open(fresh, pg_dsn, schemas)                                # a new folder: a schema of its own
    assert new.index_state.db.schema != legacy and len(new.index_state) == 0
    new.close()


def test_a_reserved_schema_name_is_a_configuration_error(tmp_path, pg_dsn):
    from hippo_engine.config import ConfigError
    with pytest.raises(ConfigError, match="'pg_x' starts with 'pg_'"):
        make_rag(tmp_path / "m", storage_backend="postgres", postgres_dsn=pg_dsn, postgres_schema="pg_x")


def test_an_embedded_postgres_index_is_found_without_storage(pg_dirs, capsys, monkeypatch):
    """``stats --save-dir DIR`` on a folder holding an embedded PostgreSQL index (it said "no index
    in DIR"), and the facade opened without ``storage=``."""
    from fakes import NgramEncoder, ScriptedLLM
    from helpers import toy_respond

    from hippo_engine.cli import main
    enc, llm = NgramEncoder(), ScriptedLLM(toy_respond)
    monkeypatch.setattr(HippoRAG, "encoder", property(lambda self: enc))
    monkeypatch.setattr(HippoRAG, "llm", property(lambda self: llm))
    base = pg_dirs()
    corpus, save = base / "c.json", base / "idx"
    corpus.write_text(json.dumps(CORPUS[:3]))
    assert main(["index", str(corpus), "--save-dir", str(save), "--storage", "postgres", "--quiet", "--extractor",
                 "openie"]) == 0
    capsys.readouterr()
    assert main(["stats", "--save-dir", str(save)]) == 0                 # (was: "no index in DIR", exit 2)
    assert json.loads(capsys.readouterr().out)["passage_nodes"] == 3
    from hippo_engine.store.opening import recorded_storage
    assert recorded_storage(save) == {"storage_backend": "postgres", "postgres_schema": "hippo", "server": "embedded",
                                      "index_id": _identity(save)["index_id"]}
    assert main(["stats", "--save-dir", str(save), "--storage", "sqlite"]) == 2
    assert "kept in postgres" in capsys.readouterr().err
    assert not (save / "index.sqlite").exists()                       # no second index beside it
    rag = HippoRAG(save, show_progress=False)
    assert rag.config.storage_backend == "postgres" and len(rag.index_state) == 3
    rag.close()
