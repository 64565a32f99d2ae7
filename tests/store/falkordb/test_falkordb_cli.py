"""The command line on FalkorDB: ``--storage falkordb`` (an embedded server in --save-dir) and
``--falkordb`` (a server's URL, or the data folder of an embedded server others share), with the real
default engine: the same results as on SQLite, and the index found again on the backend its folder
recorded."""
from __future__ import annotations

import json

import pytest
from helpers import require_falkordb

from hippo_engine.cli import main

DOCS = [{"id": "obs", "title": "Vellmar Observatory", "text": "The Vellmar Observatory stands on Mount Caldis."},
        {"id": "ilse", "title": "Ilse Marrow", "text": "Ilse Marrow founded the Vellmar Observatory in 1881."},
        {"id": "caldis", "title": "Mount Caldis", "text": "Mount Caldis is the highest peak of Kaldavia."}]
QUESTION = "On which mountain does the observatory founded by Ilse Marrow stand?"


def _run(capsys, *argv) -> str:
    assert main(list(argv)) == 0
    return capsys.readouterr().out


def _results(capsys, save, *flags):
    out = json.loads(_run(capsys, "retrieve", "--save-dir", str(save), "-q", QUESTION, "--top-k", "3", "--json",
                          *flags))
    return [(s["doc_ids"], s["doc_scores"]) for s in out["solutions"]]


@pytest.mark.slow
def test_index_retrieve_and_stats_on_its_own_and_a_shared_embedded_server(tmp_path, capsys, falkordb_server):
    require_falkordb()
    corpus = tmp_path / "docs.json"
    corpus.write_text(json.dumps(DOCS), encoding="utf-8")
    _run(capsys, "index", str(corpus), "--save-dir", str(tmp_path / "lite"), "--quiet")
    want = _results(capsys, tmp_path / "lite")
    shared = ["--falkordb", str(falkordb_server.data_dir)]
    runs = ((tmp_path / "own", ["--storage", "falkordb"], []), (tmp_path / "shared", shared, shared))
    for save, flags, again in runs:
        _run(capsys, "index", str(corpus), "--save-dir", str(save), "--quiet", *flags)
        assert _results(capsys, save, *again) == want          # --storage falkordb: the folder recorded it
        assert json.loads(_run(capsys, "stats", "--save-dir", str(save), *again))["documents"] == 3
    assert (tmp_path / "own" / "falkordb").is_dir() and not (tmp_path / "shared" / "falkordb").exists()


@pytest.mark.slow
def test_the_designs_cypher_on_a_memory_built_by_the_command_line(tmp_path, capsys):
    """``hippo-engine index --storage falkordb`` with the real default engine, then the knowledge-base design's
    retrieval written in Cypher through the ``falkordb`` client: a vector search on entities with the engine's
    own query vector, then the documents that mention what it found and their neighbours."""
    require_falkordb()
    import falkordb

    from hippo_engine import HippoRAG
    from hippo_engine.store.falkordb.server import EmbeddedFalkorDB
    corpus = tmp_path / "docs.json"
    corpus.write_text(json.dumps(DOCS), encoding="utf-8")
    save = tmp_path / "mem"
    _run(capsys, "index", str(corpus), "--save-dir", str(save), "--storage", "falkordb", "--quiet")
    rag = HippoRAG(save, show_progress=False)                 # keeps the server up; its encoder for the query
    try:
        q = rag.encoder.encode(["Mount Caldis"])[0]                 # as entity names are encoded
        graph = falkordb.FalkorDB(**EmbeddedFalkorDB(save / "falkordb").address().client_args()).select_graph("hippo")
        hits = graph.ro_query("CALL db.idx.vector.queryNodes('Entity', 'embedding', 2, vecf32($q)) YIELD node, score "
                              "RETURN node.name ORDER BY score", {"q": q.tolist()}).result_set
        assert hits[0] == ["mount caldis"]
        docs = graph.ro_query("MATCH (d:Document)-[:MENTIONS]->(e:Entity {name: $n}) RETURN d.id ORDER BY d.id",
                              {"n": "mount caldis"}).result_set
        assert [r[0] for r in docs] == ["caldis", "obs"]
        hop = graph.ro_query("MATCH (:Entity {name: $n})<-[:INVOLVES]-(:Fact)-[:INVOLVES]->(m:Entity) "
                             "RETURN DISTINCT m.name ORDER BY m.name", {"n": "mount caldis"}).result_set
        assert ["the vellmar observatory"] in hop or ["vellmar observatory"] in hop
    finally:
        rag.close()
