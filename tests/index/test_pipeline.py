"""Indexing core on fakes: idempotence, incrementality, delete, graph weights."""
import json

import numpy as np
from fakes import NgramEncoder, NoCallLLM, ScriptedLLM
from helpers import CORPUS, assert_same, crash_mid_index, make_rag, snapshot

from hippo_engine import HippoRAG
from hippo_engine.ids import chunk_id, entity_id, facts_by_id, triple_id
from hippo_engine.index.graph import CONTEXT_WEIGHT, FACT_WEIGHT


def test_index_builds_graph(tmp_path):
    rag = make_rag(tmp_path)
    rep = rag.index(CORPUS)
    assert rep["added"] == len(CORPUS)
    s = rag.graph_stats()
    assert s["passage_nodes"] == len(CORPUS)
    assert s["entity_nodes"] > 10 and s["fact_edges"] > 5 and s["context_edges"] > 10
    # fact edge weight: 2 per occurrence; "ilse marrow" - "lake veloria" occurs once
    e = rag.graph.edge_dict()
    a, b = entity_id("ilse marrow"), entity_id("lake veloria")
    assert e[tuple(sorted((a, b)))] >= FACT_WEIGHT
    # context edge passage-entity weight 1 (+ nothing else between them)
    pid = chunk_id(CORPUS[0])
    assert e[tuple(sorted((pid, a)))] == CONTEXT_WEIGHT
    # one edge per pair, no self loops
    g = rag.graph
    assert len(set(zip(g.src, g.dst, strict=False))) == len(g.src) and np.all(g.src < g.dst)


def test_idempotent(tmp_path):
    rag = make_rag(tmp_path / "a")
    rag.index(CORPUS)
    first = snapshot(rag)
    calls = rag.llm.calls
    rep = rag.index(CORPUS)
    assert rep["added"] == 0 and rag.llm.calls == calls
    assert_same(first, snapshot(rag))


def test_incremental_equals_batch(tmp_path):
    A, B = CORPUS[:5], CORPUS[5:]
    inc = make_rag(tmp_path / "inc")
    inc.index(A)
    inc.index(B)
    full = make_rag(tmp_path / "full")
    full.index(A + B)
    assert_same(snapshot(inc), snapshot(full))
    assert snapshot(full)["synonymy"] == snapshot(inc)["synonymy"]


def test_delete_equals_never_added(tmp_path):
    A, B = CORPUS[:5], CORPUS[5:]
    rag = make_rag(tmp_path / "d")
    rag.index(A + B)
    rag.delete(B)
    only_a = make_rag(tmp_path / "a")
    only_a.index(A)
    assert_same(snapshot(rag), snapshot(only_a))


def test_synonymy_cap_and_delete_recomputes(tmp_path):
    # near-identical entities so every one has more neighbours than the cap
    docs = [f"Doc {i}\nAlpha Station{i} related Beta Station{i}." for i in range(12)]
    kw = dict(synonymy_max_neighbors=3, synonymy_threshold=0.5)
    rag = make_rag(tmp_path / "x", **kw)
    rag.index(docs)
    assert all(len(v) <= 3 for v in rag.index_state.synonymy.values())
    rag.delete(docs[:4])
    ref = make_rag(tmp_path / "y", **kw)
    ref.index(docs[4:])
    assert snapshot(rag)["synonymy"] == snapshot(ref)["synonymy"]
    assert_same(snapshot(rag), snapshot(ref))


def test_persistence_roundtrip(tmp_path):
    rag = make_rag(tmp_path)
    rag.index(CORPUS)
    before = snapshot(rag)
    rag.close()
    again = HippoRAG(tmp_path, llm=NoCallLLM(), encoder=NgramEncoder(), show_progress=False,
                     synonymy_threshold=0.6)
    assert_same(before, snapshot(again))
    # the saved graph is used (same version), and removing it rebuilds the same graph
    (tmp_path / "graph.npz").unlink()
    again2 = HippoRAG(tmp_path, llm=NoCallLLM(), encoder=NgramEncoder(), show_progress=False)
    assert again2.graph.edge_dict() == before["edges"]


def test_crash_mid_index_keeps_previous_state(tmp_path, monkeypatch):
    rag = make_rag(tmp_path)
    rag.index(CORPUS[:4])
    before = snapshot(rag)
    crash_mid_index(rag, CORPUS[4:], monkeypatch)
    assert_same(before, snapshot(rag))
    def no_call(messages):
        raise AssertionError("the LLM was called")

    reopened = make_rag(tmp_path, llm=ScriptedLLM(no_call))  # same model name -> same OpenIE file
    assert_same(before, snapshot(reopened))
    # the OpenIE work done before the crash was kept: retry makes no LLM call
    reopened.index(CORPUS[4:])
    assert reopened.graph_stats()["passage_nodes"] == len(CORPUS)


def test_non_latin_entities_stay_distinct(tmp_path):
    def respond(messages):
        user = messages[-1]["content"]
        if "Named entities:" not in user:
            return json.dumps({"named_entities": []})
        if "東京" in user:
            return json.dumps({"triples": [["東京", "capital of", "日本"]]})
        return json.dumps({"triples": [["Москва", "capital of", "Россия"]]})

    rag = make_rag(tmp_path, llm=ScriptedLLM(respond))
    rag.index(["東京は日本の首都です。", "Москва — столица России."])
    names = {rag.index_state.stores["entity"].text(e) for e in rag.index_state.stores["entity"].ids}
    assert names == {"東京", "日本", "москва", "россия"}
    assert rag.graph_stats()["entity_nodes"] == 4


def _graph_arrays(g):
    return (list(g.node_ids), g.num_entities, g.src.tolist(), g.dst.tolist(), g.weight.tolist(), g.kinds.tolist())


def test_incremental_graph_is_bit_identical_and_not_rebuilt(tmp_path, monkeypatch):
    """Inserts merge into the previous graph (no rebuild) and give exactly the arrays a
    from-scratch build gives, also after reopening the index (graph.npz)."""
    import hippo_engine.index.state as ix
    inc = make_rag(tmp_path / "inc")
    inc.index(CORPUS[:3])

    def no_rebuild(*a, **k):
        raise AssertionError("graph rebuilt from scratch on insert")

    monkeypatch.setattr(ix, "build_graph", no_rebuild)
    inc.index(CORPUS[3:6])
    inc.close()
    reopened = make_rag(tmp_path / "inc")
    reopened.index(CORPUS[6:])           # starts from the saved graph.npz
    monkeypatch.undo()
    full = make_rag(tmp_path / "full")
    full.index(CORPUS)
    assert _graph_arrays(reopened.graph) == _graph_arrays(full.graph)
    assert snapshot(reopened)["synonymy"] == snapshot(full)["synonymy"]


def test_short_entities_are_not_synonymy_queries(tmp_path):
    def respond(messages):
        user = messages[-1]["content"]
        if "Named entities:" not in user:
            return json.dumps({"named_entities": []})
        if "first" in user:
            return json.dumps({"triples": [["ab", "near", "abc"], ["abc", "near", "abd"]]})
        return json.dumps({"triples": [["ab", "near", "xyz"], ["abd", "near", "ab"]]})

    kw = dict(synonymy_threshold=0.0, synonymy_min_alnum_chars=3)
    inc = make_rag(tmp_path / "i", llm=ScriptedLLM(respond), **kw)
    inc.index(["the first one"])
    inc.index(["the second one"])
    full = make_rag(tmp_path / "f", llm=ScriptedLLM(respond), **kw)
    full.index(["the first one", "the second one"])
    short = entity_id("ab")
    assert short not in inc.index_state.synonymy                       # never a query
    assert any(short in nb for nb in inc.index_state.synonymy.values())  # but a neighbour
    assert snapshot(inc)["synonymy"] == snapshot(full)["synonymy"]
    assert _graph_arrays(inc.graph) == _graph_arrays(full.graph)


def test_chunked_encoding_gives_the_same_index(tmp_path, monkeypatch):
    from hippo_engine.index.writer import IndexWriter
    ref = make_rag(tmp_path / "ref")
    ref.index(CORPUS)
    monkeypatch.setattr(IndexWriter, "ENCODE_CHUNK", 3)
    small = make_rag(tmp_path / "small")
    small.index(CORPUS)
    assert_same(snapshot(ref), snapshot(small))
    assert _graph_arrays(ref.graph) == _graph_arrays(small.graph)


def test_facts_by_id_one_entry_per_fact():
    t1, t2 = ("a", "likes", "b"), ("b", "owns", "c")
    got = facts_by_id({"p1": [t1, t2], "p2": [t1]})
    assert got == {triple_id(t1): t1, triple_id(t2): t2}


def test_vectors_loaded_after_another_writer_committed_bring_the_facts_along(tmp_path):
    """A reader whose facts were loaded at version v, and whose vectors are first loaded after a
    writer committed v+1, must not pair v+1 vectors with v facts (found racing two writers and a
    reader: KeyError in Retriever.from_index)."""
    writer = make_rag(tmp_path / "idx", use_filter=False)
    writer.index(CORPUS[:3])
    reader = make_rag(tmp_path / "idx", use_filter=False)
    state = reader.index_state
    assert state._stores is None                        # facts loaded, vectors not yet
    writer.index(CORPUS[3:6])
    stores = state.stores                               # vectors now at the newer version
    assert state.loaded_version == state.version        # ... and the facts followed them
    assert len(stores["passage"]) == 6 == len(state.passage_triples)
    assert state.graph.stats()["passage_nodes"] == 6
    assert len(reader.retrieve(["Who founded Tamsin College?"])[0].docs) == 6
