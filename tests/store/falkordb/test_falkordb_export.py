"""Exporting into and out of FalkorDB (``hippo-engine export --to falkordb``): the copy in the graph
database is the same index (snapshot, rankings with float scores, documents in order), readable with
plain Cypher, and back in a folder again; the real default engine ranks and explains alike."""
from __future__ import annotations

from helpers import (
    CORPUS,
    assert_copy_alike,
    index_view,
    make_rag,
    real_sample_index,
    real_sample_rankings,
    require_falkordb,
)

from hippo_engine.cli import main
from hippo_engine.config import HippoConfig
from hippo_engine.export import export_index

IDS = [f"d{i}" for i in range(len(CORPUS))]


def test_sqlite_to_an_embedded_falkordb_and_back_with_the_command_line(tmp_path, capsys):
    require_falkordb()
    src = make_rag(tmp_path / "src", use_filter=False)
    src.index(CORPUS, ids=IDS, metadata=[{"n": i} for i in range(len(CORPUS))])
    src.delete(ids=["d3"])
    want = index_view(src)
    src.close()
    assert main(["export", "--save-dir", str(tmp_path / "src"), str(tmp_path / "fk"), "--to", "falkordb",
                 "--quiet"]) == 0
    assert "exported 7 passages" in capsys.readouterr().out
    assert_copy_alike(tmp_path / "fk", want)                      # found on its recorded backend
    import falkordb

    from hippo_engine.store.falkordb.server import EmbeddedFalkorDB
    server = EmbeddedFalkorDB(tmp_path / "fk" / "falkordb")
    server.start()
    try:
        graph = falkordb.FalkorDB(**server.address().client_args()).select_graph("hippo")
        rows = graph.ro_query("MATCH (d:Document) RETURN d.id ORDER BY d.id").result_set
        assert [r[0] for r in rows] == sorted(i for i in IDS if i != "d3")
    finally:
        server.stop()
    assert main(["export", "--save-dir", str(tmp_path / "fk"), str(tmp_path / "back"), "--quiet"]) == 0
    assert_copy_alike(tmp_path / "back", want)


def test_a_real_memory_exported_to_falkordb_ranks_and_explains_alike(tmp_path, storage_settings):
    """The default engine (MiniLM, spaCy, extractor ner) on the bundled sample, copied onto the session's
    FalkorDB server: the same rankings, scores and explanations."""
    settings = storage_settings("falkordb")
    real_sample_index(tmp_path / "src")
    want = real_sample_rankings(tmp_path / "src")
    assert all(len(w[2]) == len(w[0]) > 0 for w in want)
    export_index(tmp_path / "src", tmp_path / "fk",
                 HippoConfig(show_progress=False, storage_backend="falkordb", **settings))
    assert real_sample_rankings(tmp_path / "fk", **settings) == want
