"""The service's workspaces on FalkorDB (``serve --storage falkordb``): the root's embedded server holds
the default workspace's graph and a graph per named workspace; isolation, listing and deletion as on
SQLite."""
from __future__ import annotations

from fakes import NgramEncoder, ScriptedLLM
from helpers import CORPUS, require_falkordb, toy_respond

from hippo_engine.service.workspaces import Workspaces


def test_workspaces_on_the_roots_embedded_falkordb(tmp_path):
    require_falkordb()
    opts = {"storage_backend": "falkordb", "llm": ScriptedLLM(toy_respond), "encoder": NgramEncoder(),
            "show_progress": False, "synonymy_threshold": 0.6, "use_filter": False}
    ws = Workspaces(tmp_path / "root", rag_options=opts, memory_options={"poll_s": 0.05, "batch_size": 4})
    try:
        default, alpha = ws.get(None, create=True), ws.get("alpha", create=True)
        default.add([{"id": "lake", "text": CORPUS[0]}])
        alpha.add([{"id": "lake", "text": CORPUS[5]}, {"id": "ilse", "text": CORPUS[1]}])
        assert default.wait(timeout=120) and alpha.wait(timeout=120)
        assert default.rag.index_state.db.location.startswith("FalkorDB graph")
        assert default.document("lake")["text"] == CORPUS[0] and alpha.document("lake")["text"] == CORPUS[5]
        got = default.retrieve(["Lake Veloria"], top_k=5)[0]["passages"]
        assert [p["text"] for p in got] == [CORPUS[0]]
        assert ws.list() == [{"name": "default", "documents": 1}, {"name": "alpha", "documents": 2}]
        ws.delete("alpha")
        assert ws.list() == [{"name": "default", "documents": 1}]
    finally:
        ws.close()
    assert (tmp_path / "root" / "falkordb").is_dir()            # the root's embedded server's data
