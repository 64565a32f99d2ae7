"""Workspaces on SQLite with fakes: names, created on first write, isolation, listing, deletion."""
from __future__ import annotations

import pytest
from fakes import NgramEncoder, ScriptedLLM
from helpers import CORPUS, toy_respond

from hippo_engine.service.workspaces import SharedEncoder, Workspaces, check_name


@pytest.fixture
def spaces(tmp_path):
    ws = Workspaces(tmp_path / "root", rag_options={"llm": ScriptedLLM(toy_respond), "encoder": NgramEncoder(),
                                                    "show_progress": False, "synonymy_threshold": 0.6,
                                                    "use_filter": False},
                    memory_options={"poll_s": 0.05, "batch_size": 4})
    yield ws
    ws.close()


@pytest.mark.parametrize("bad", ["", "A", "-x", "_x", "a/b", "..", "a b", "x" * 64, "é", "a\n", 3])
def test_bad_workspace_names_are_refused(bad):
    with pytest.raises(ValueError, match="workspace name"):
        check_name(bad)


def test_good_names_and_the_default():
    assert check_name(None) == "default" and check_name("default") == "default"
    assert check_name("team-a_2") == "team-a_2" and check_name("x" * 63) == "x" * 63


def test_a_workspace_is_made_on_first_write_and_read_only_after(spaces):
    with pytest.raises(KeyError):
        spaces.get("alpha", create=False)
    assert not (spaces.root / "workspaces" / "alpha").exists()
    mem = spaces.get("alpha", create=True)
    assert mem.rag.save_dir == spaces.root / "workspaces" / "alpha"
    assert spaces.get("alpha", create=False) is mem
    assert spaces.get(None, create=False).rag.save_dir == spaces.root      # the default always exists


def test_workspaces_are_isolated(spaces):
    a, b = spaces.get("alpha", create=True), spaces.get("beta", create=True)
    a.add([{"id": "shared-id", "text": CORPUS[0]}, {"id": "only-a", "text": CORPUS[1]}])
    b.add([{"id": "shared-id", "text": CORPUS[5]}])
    assert a.wait(timeout=60) and b.wait(timeout=60)
    assert b.document("only-a") is None
    assert a.document("shared-id")["text"] == CORPUS[0] and b.document("shared-id")["text"] == CORPUS[5]
    got = b.retrieve(["Lake Veloria"], top_k=5)[0]["passages"]
    assert [p["text"] for p in got] == [CORPUS[5]]                          # b holds only its one document
    assert a.rag.index_state.db.path != b.rag.index_state.db.path
    assert b.delete(["only-a"]) == {"deleted": [], "unknown": ["only-a"]}   # b cannot delete a's documents
    assert a.document("only-a")["status"] == "indexed"
    assert spaces.get(None, create=False).documents()["total"] == 0


def test_list_and_delete(spaces):
    spaces.get("alpha", create=True).add([{"text": CORPUS[0]}, {"text": CORPUS[1]}])
    spaces.get("beta", create=True)
    assert spaces.list() == [{"name": "default", "documents": 0}, {"name": "alpha", "documents": 2},
                             {"name": "beta", "documents": 0}]
    assert spaces.delete("alpha") is True
    assert not (spaces.root / "workspaces" / "alpha").exists()
    assert [w["name"] for w in spaces.list()] == ["default", "beta"]
    assert spaces.delete("alpha") is False
    with pytest.raises(KeyError):
        spaces.get("alpha", create=False)
    fresh = spaces.get("alpha", create=True)                                   # a new, empty one
    assert fresh.documents()["total"] == 0
    with pytest.raises(ValueError, match="default workspace cannot be deleted"):
        spaces.delete("default")


def test_stats_see_what_the_worker_wrote_through_its_own_engine(spaces):
    mem = spaces.get("alpha", create=True)
    assert mem.stats()["documents"]["indexed"] == 0
    mem.add([{"text": CORPUS[0]}, {"text": CORPUS[3]}])
    assert mem.wait(timeout=60)
    s = mem.stats()
    assert s["graph"]["passage_nodes"] == 2 and s["documents"]["indexed"] == 2


def test_every_workspace_and_both_engines_of_one_share_one_encoder(spaces):
    a, b = spaces.get("alpha", create=True), spaces.get(None, create=True)
    assert isinstance(a.rag.encoder, SharedEncoder)
    assert a.rag.encoder is a.writer.encoder is b.rag.encoder is b.writer.encoder
    assert a.writer is not a.rag


def test_a_closed_and_reopened_workspace_keeps_its_documents(tmp_path):
    opts = {"llm": ScriptedLLM(toy_respond), "encoder": NgramEncoder(), "show_progress": False,
            "synonymy_threshold": 0.6, "use_filter": False}
    ws = Workspaces(tmp_path / "root", rag_options=opts, memory_options={"poll_s": 0.05})
    ws.get("alpha", create=True).add([{"id": "x", "text": CORPUS[2]}])
    assert ws.get("alpha", create=False).wait(timeout=60)
    ws.close()
    ws = Workspaces(tmp_path / "root", rag_options=opts)
    try:
        assert ws.list()[1] == {"name": "alpha", "documents": 1}
        assert ws._memories == {}                            # listing opened nothing
        assert ws.get("alpha", create=False).document("x")["status"] == "indexed"
    finally:
        ws.close()


def test_an_existing_index_keeps_the_extractor_it_was_built_with(tmp_path):
    opts = {"llm": ScriptedLLM(toy_respond), "encoder": NgramEncoder(), "show_progress": False,
            "synonymy_threshold": 0.6, "use_filter": False}
    ws = Workspaces(tmp_path / "root", rag_options={**opts, "extractor": "ner"}, memory_options={"poll_s": 0.05})
    ws.get("alpha", create=True).add([{"id": "x", "text": CORPUS[2]}])
    assert ws.get("alpha", create=False).wait(timeout=60)
    ws.close()
    ws = Workspaces(tmp_path / "root", rag_options=opts, memory_options={"poll_s": 0.05})   # no extractor given
    try:
        mem = ws.get("alpha", create=False)
        assert mem.rag.config.extractor == mem.writer.config.extractor == "ner"
        mem.add([{"id": "y", "text": CORPUS[3]}])
        assert mem.wait(timeout=60)
        assert mem.document("y")["status"] == "indexed"
    finally:
        ws.close()


def test_a_workspace_another_process_deleted_is_forgotten(tmp_path):
    opts = {"llm": ScriptedLLM(toy_respond), "encoder": NgramEncoder(), "show_progress": False,
            "synonymy_threshold": 0.6, "use_filter": False}
    mine = Workspaces(tmp_path / "root", rag_options=opts, memory_options={"poll_s": 0.05})
    other = Workspaces(tmp_path / "root", rag_options=opts, memory_options={"poll_s": 0.05})
    try:
        mine.get("alpha", create=True).add([{"id": "x", "text": CORPUS[2]}])
        assert mine.get("alpha", create=False).wait(timeout=60)
        assert other.delete("alpha")                         # as another server process would
        with pytest.raises(KeyError):
            mine.get("alpha", create=False)                  # not our stale copy
        fresh = mine.get("alpha", create=True)               # a write makes it anew, empty
        assert fresh.document("x") is None
    finally:
        mine.close()
        other.close()


@pytest.mark.parametrize(("given", "backend", "server"), [
    ({}, None, None),
    ({"storage": "postgres"}, "postgres", None),
    ({"dsn": "postgresql://u@h/db"}, "postgres", "postgresql://u@h/db"),
    ({"postgres_dsn": "postgresql://u@h/db", "storage_backend": "sqlite"}, "postgres", "postgresql://u@h/db"),
    ({"falkordb_server": "falkordb://h:6379/g"}, "falkordb", "falkordb://h:6379/g"),
    ({"storage_backend": "falkordb"}, "falkordb", None),
])
def test_a_backends_server_setting_chooses_it_for_every_workspace(tmp_path, given, backend, server):
    """Each backend names its own server setting (``StorageBackend.server_setting``): the service needs no
    list of backends of its own."""
    from hippo_engine.service.workspace_parts import storage_options
    opts, storage, where = storage_options(tmp_path, {**given, "extractor": "ner"})
    assert (storage, where) == (backend, server)
    assert opts == {"extractor": "ner"}                       # the server settings go to the shared storage
