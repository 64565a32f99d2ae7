"""Exporting into and out of FalkorDB (``hippo-engine export --to falkordb``): the copy in the graph
database is the same index (snapshot, rankings with float scores, documents in order), readable with
plain Cypher, and back in a folder again; the real default engine ranks and explains alike."""
from __future__ import annotations

import json
from importlib import resources

import numpy as np
from helpers import CORPUS, assert_same, make_rag, require_falkordb, snapshot

from hippo_engine.cli import main
from hippo_engine.config import HippoConfig
from hippo_engine.export import export_index

QUERIES = ["Who mapped Lake Veloria?", "Where was Ilse Marrow born?", "Who founded Tamsin College?"]
IDS = [f"d{i}" for i in range(len(CORPUS))]


def _view(rag):
    sols = rag.retrieve(QUERIES)
    return (snapshot(rag), [(s.doc_ids, np.asarray(s.doc_scores).tolist()) for s in sols],
            [d["id"] for d in rag.documents(limit=100)["documents"]])


def test_sqlite_to_an_embedded_falkordb_and_back_with_the_command_line(tmp_path, capsys):
    require_falkordb()
    src = make_rag(tmp_path / "src", use_filter=False)
    src.index(CORPUS, ids=IDS, metadata=[{"n": i} for i in range(len(CORPUS))])
    src.delete(ids=["d3"])
    want = _view(src)
    src.close()
    assert main(["export", "--save-dir", str(tmp_path / "src"), str(tmp_path / "fk"), "--to", "falkordb",
                 "--quiet"]) == 0
    assert "exported 7 passages" in capsys.readouterr().out
    fk = make_rag(tmp_path / "fk", use_filter=False)              # found on its recorded backend
    got = _view(fk)
    assert_same(got[0], want[0])
    assert got[1:] == want[1:]
    fk.close()
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
    back = make_rag(tmp_path / "back", use_filter=False)
    got = _view(back)
    assert_same(got[0], want[0])
    assert got[1:] == want[1:]
    back.close()


def test_a_real_memory_exported_to_falkordb_ranks_and_explains_alike(tmp_path, storage_settings):
    """The default engine (MiniLM, spaCy, extractor ner) on the bundled sample, copied onto the session's
    FalkorDB server: the same rankings, scores and explanations."""
    from hippo_engine import HippoRAG
    data = json.loads(resources.files("hippo_engine").joinpath("data/sample_corpus.json").read_text("utf-8"))
    docs = [f"{d['title']}\n{d['text']}" for d in data["corpus"]]
    questions = [q["question"] for q in data["questions"]]
    settings = storage_settings("falkordb")

    def ranked(folder, **kw):
        rag = HippoRAG(folder, show_progress=False, **kw)
        try:
            return [(s.doc_ids, np.asarray(s.doc_scores).tolist(), [(e.score, e.placed_by) for e in s.explanations])
                    for s in rag.retrieve(questions, 10, explain=True)]
        finally:
            rag.close()

    rag = HippoRAG(tmp_path / "src", extractor="ner", show_progress=False)
    rag.index(docs, ids=[f"s{i}" for i in range(len(docs))])
    rag.close()
    want = ranked(tmp_path / "src")
    assert all(len(w[2]) == len(w[0]) > 0 for w in want)
    export_index(tmp_path / "src", tmp_path / "fk",
                 HippoConfig(show_progress=False, storage_backend="falkordb", **settings))
    assert ranked(tmp_path / "fk", **settings) == want
