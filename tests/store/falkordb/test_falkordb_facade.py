"""The engine on FalkorDB (``storage="falkordb"``): the same index and rankings as on SQLite through an
insert, a re-index and a delete, a reopen seeing the same, the embedded server started in the index folder
and stopped by ``close()``, and the design's data model readable with plain Cypher."""
from __future__ import annotations

import numpy as np
from helpers import CORPUS, assert_same, make_rag, require_falkordb, snapshot

QUERIES = ["Who mapped Lake Veloria?", "Where was Ilse Marrow born?", "Who founded Tamsin College?"]


def _rankings(rag):
    return [(s.docs[:20], np.asarray(s.doc_scores[:20]).tolist(), s.doc_ids[:20]) for s in rag.retrieve(QUERIES)]


def test_falkordb_index_equals_sqlite_through_insert_reindex_delete_and_reopen(tmp_path, storage_settings):
    settings = storage_settings("falkordb")
    fk = make_rag(tmp_path / "fk", storage_backend="falkordb", use_filter=False, **settings)
    lite = make_rag(tmp_path / "lite", use_filter=False)
    assert fk.index_state.db.location.startswith("FalkorDB graph hippo_fk_")
    for rag in (fk, lite):
        rag.index(CORPUS[:5], ids=[f"d{i}" for i in range(5)])
        rag.index(CORPUS[3:], ids=[f"d{i}" for i in range(3, len(CORPUS))])     # incremental, overlapping
    assert_same(snapshot(fk), snapshot(lite))
    assert _rankings(fk) == _rankings(lite)                  # same passages, ids and float scores
    for rag in (fk, lite):
        rag.delete(ids=["d1", "d6"])
    assert_same(snapshot(fk), snapshot(lite))
    assert _rankings(fk) == _rankings(lite)
    fk.close()
    again = make_rag(tmp_path / "fk", storage_backend="falkordb", use_filter=False, **settings)
    assert _rankings(again) == _rankings(lite)               # another process opening it sees the same
    again.close()


def test_embedded_server_in_save_dir_and_the_design_cypher(tmp_path):
    require_falkordb()
    import falkordb

    from hippo_engine.store.falkordb.server import EmbeddedFalkorDB
    save = tmp_path / "memory"
    rag = make_rag(save, storage="falkordb", use_filter=False)
    rag.index(CORPUS[:3], ids=["a", "b", "c"])
    server = EmbeddedFalkorDB(save / "falkordb")
    assert server.running()
    graph = falkordb.FalkorDB(**server.address().client_args()).select_graph("hippo")
    docs = graph.ro_query("MATCH (d:Document)-[:MENTIONS]->(e:Entity) RETURN d.id, count(DISTINCT e) ORDER BY d.id")
    assert [r[0] for r in docs.result_set] == ["a", "b", "c"] and all(r[1] > 0 for r in docs.result_set)
    eid, name, vec = graph.ro_query("MATCH (e:Entity) WHERE e.embedding IS NOT NULL RETURN e.id, e.name, "
                                    "e.embedding ORDER BY e.id LIMIT 1").result_set[0]
    hits = graph.ro_query("CALL db.idx.vector.queryNodes('Entity', 'embedding', 3, vecf32($q)) YIELD node, score "
                          "RETURN node.id, node.name ORDER BY score", {"q": vec}).result_set
    assert hits[0] == [eid, name] and len(hits) == 3            # the design's vector query finds the entity
    rag.close()
    assert not server.running()                              # close() left the server it started
    rag = make_rag(save, use_filter=False)                    # no storage named: the folder's backend
    assert rag.config.storage_backend == "falkordb" and rag.graph_stats()["passage_nodes"] == 3   # the data stayed
    rag.close()
