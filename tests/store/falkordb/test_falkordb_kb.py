"""The kb_* modes on FalkorDB (issue 42, item 3): kb_graph and kb_hybrid traverse in the database and
kb_global takes its communities from the vector index on the community summaries, with the same passage
ids, float scores and seeds as on SQLite (the toy corpus with communities and reports; the default engine
with the ner extractor on the bundled sample), and the database is asked (the graph questions counted)."""
from __future__ import annotations

import json
import logging
import sys
from collections import Counter
from importlib import resources
from pathlib import Path

import numpy as np
import pytest
from fakes import NoCallLLM

from hippo_engine.config import HippoConfig, QueryParam
from hippo_engine.export import export_index
from hippo_engine.kb.graph import reach
from hippo_engine.store.falkordb.store import FalkorIndexStore

sys.path.insert(0, str(Path(__file__).parents[2] / "graphrag"))
from peer_fakes import QUERIES, built_rag  # noqa: E402

KB = ("kb_vector", "kb_graph", "kb_hybrid", "kb_global")
ASKED = {"kb_vector": set(), "kb_graph": {"reach", "entity_passages"}, "kb_hybrid": {"reach", "entity_passages"},
         "kb_global": {"nearest_communities"}}


class CountedQueries:
    """A store's graph questions, each call counted in ``calls``."""

    def __init__(self, inner, calls: Counter):
        self.inner, self.calls = inner, calls

    def reach(self, seeds, hops, passages):
        self.calls["reach"] += 1
        return self.inner.reach(seeds, hops, passages)

    def entity_passages(self, entity_ids):
        self.calls["entity_passages"] += 1
        return self.inner.entity_passages(entity_ids)

    def nearest_communities(self, vector, k):
        self.calls["nearest_communities"] += 1
        got = self.inner.nearest_communities(vector, k)
        self.calls["communities_found"] += len(got)
        return got


@pytest.fixture
def counted(monkeypatch) -> Counter:
    """The calls of FalkorDB's graph questions in this test."""
    calls: Counter = Counter()
    asked = FalkorIndexStore.graph_queries
    monkeypatch.setattr(FalkorIndexStore, "graph_queries", lambda self: CountedQueries(asked(self), calls))
    return calls


def ranked(rag, queries, mode: str, **param) -> list[tuple]:
    """Each query's passage ids, float scores and seeds in ``mode``."""
    return [(s.passage_ids, np.asarray(s.doc_scores).tolist(), s.seed_entities)
            for s in rag.retrieve(queries, param=QueryParam(mode=mode, **param))]


def assert_kb_modes_alike(fk, lite, queries, counted: Counter, caplog, **param) -> None:
    """Every kb mode ranks alike on ``fk`` (FalkorDB) and ``lite`` (SQLite); the database answered the
    graph questions of the modes that ask them, and the vector index missed no community."""
    for mode in KB:
        counted.clear()
        with caplog.at_level(logging.INFO, logger="hippo_engine.kb.global_search"):
            got = ranked(fk, queries, mode, **param)
        want = ranked(lite, queries, mode, **param)
        assert got == want, mode
        assert any(g[0] for g in got), f"{mode} found nothing: a vacuous comparison"
        assert set(k for k in counted if k in ASKED["kb_graph"] | ASKED["kb_global"]) == ASKED[mode], mode
        assert all(counted[k] == len(queries) for k in ASKED[mode]), (mode, counted)
        if mode == "kb_global":
            assert counted["communities_found"] > 0
    assert not [r for r in caplog.records if "missed" in r.getMessage()]


def test_toy_corpus_kb_modes_on_falkordb_equal_sqlite(tmp_path, storage_settings, counted, caplog):
    settings = storage_settings("falkordb")
    lite, _ = built_rag(tmp_path / "lite")
    fk, _ = built_rag(tmp_path / "fk", storage_backend="falkordb", **settings)
    try:
        for rag in (lite, fk):
            rag._llm = NoCallLLM()
        assert_kb_modes_alike(fk, lite, QUERIES, counted, caplog)
        assert_kb_modes_alike(fk, lite, QUERIES, counted, caplog, score_threshold=0.0, top_k=50)
        options = {label: opts.get("embedding") for label, opts in fk.index_state.db.q(
            "list indexes", "CALL db.indexes() YIELD label, options RETURN label, options")}
        assert options["CommunitySummary"]["efRuntime"] == 200 and options["CommunitySummary"]["M"] == 32
    finally:
        fk.close()
        lite.close()


def test_toy_corpus_reach_in_the_database_equals_the_engine_graph(tmp_path, storage_settings):
    """From every entity, 1 and 2 hops: the database's reach is the engine graph's, entity for entity."""
    lite, _ = built_rag(tmp_path / "fk", storage_backend="falkordb", **storage_settings("falkordb"))
    try:
        eng = lite.hirag.engine(need_communities=False)
        db = lite.index_state.db.graph_queries()
        from hippo_engine.kb.graph import GraphPassages
        passages = GraphPassages(eng)
        ids = eng.graph.node_ids
        compared = 0
        for e in range(eng.graph.num_entities):
            for hops in (1, 2):
                want = {str(ids[n]): h for n, h in reach(eng, [e], hops).items()}
                assert db.reach([str(ids[e])], hops, passages) == want
                compared += len(want) > 1
            got = db.entity_passages([str(ids[e])]).get(str(ids[e]), set())
            assert got == {str(ids[p]) for p in eng.ent_passages[e]}
        assert compared > 0
    finally:
        lite.close()


def test_sample_corpus_ner_kb_modes_on_falkordb_equal_sqlite(tmp_path, storage_settings, counted, caplog):
    """The default engine (MiniLM, spaCy, extractor ner) on the bundled sample, communities built, then
    copied onto the session's FalkorDB server: every kb mode ranks alike."""
    from hippo_engine import HippoRAG
    data = json.loads(resources.files("hippo_engine").joinpath("data/sample_corpus.json").read_text("utf-8"))
    docs = [f"{d['title']}\n{d['text']}" for d in data["corpus"]]
    questions = [q["question"] for q in data["questions"]]
    settings = storage_settings("falkordb")
    src = HippoRAG(tmp_path / "src", extractor="ner", show_progress=False)
    src.index(docs, ids=[f"s{i}" for i in range(len(docs))])
    src.retrieve(questions[:1], param=QueryParam(mode="kb_global"))      # communities built (no LLM reports)
    src.close()
    export_index(tmp_path / "src", tmp_path / "fk", HippoConfig(show_progress=False, storage_backend="falkordb",
                                                                 **settings))
    lite = HippoRAG(tmp_path / "src", show_progress=False)
    fk = HippoRAG(tmp_path / "fk", show_progress=False, **settings)
    try:
        assert_kb_modes_alike(fk, lite, questions, counted, caplog)
    finally:
        fk.close()
        lite.close()
