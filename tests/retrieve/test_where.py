"""Metadata filters at query time (``where=``) through the facade, on SQLite with the fake LLM and
encoder (PostgreSQL: ``tests/store/test_where_backends.py``): two users' documents whose entities overlap,
queries filtered to each never show anything of the other's (passages, facts, seed entities,
document ids, explanation walks), the filter applies before ranking (top-k full), a filter that
matches everything ranks exactly as no filter, and the pieces of :mod:`hippo_engine.retrieve.filtering`."""
from __future__ import annotations

import numpy as np
import pytest
from helpers import CORPUS, make_rag

from hippo_engine.config import ConfigError, QueryParam
from hippo_engine.datatypes import HiContext, QuerySolution
from hippo_engine.ids import chunk_id
from hippo_engine.index.graph import KIND_CONTEXT
from hippo_engine.retrieve.facts.fact_search import MatrixSearch, SubsetSearch
from hippo_engine.retrieve.facts.seeding import passage_seeds
from hippo_engine.retrieve.filtering import HIDDEN, Restriction, _rows_in, context_solutions, keep_matching_documents
from hippo_engine.retrieve.scoring import dense_first, min_max, top_k

IDS = [f"d{i}" for i in range(len(CORPUS))]
USERS = {"alice": [i for i in range(len(CORPUS)) if i % 2 == 0], "bob": [i for i in range(len(CORPUS)) if i % 2]}
META = [{"user": "alice" if i % 2 == 0 else "bob", "session": i // 4, "time": 10 * i} for i in range(len(CORPUS))]
QUERIES = [d.split("\n", 1)[0] for d in CORPUS] + ["Where was the geologist who founded Tamsin College from?",
                                                    "Who married the founder of the Amber Fair?"]
MODES = ("hipporag2", "naive", "hi_local", "hi_bridge", "hi")


@pytest.fixture(scope="module", params=["openie", "ner"])
def rag(request, tmp_path_factory):
    kw = {} if request.param == "openie" else {"extractor": "ner"}
    r = make_rag(tmp_path_factory.mktemp(request.param), use_filter=False, **kw)
    r.index(CORPUS, ids=IDS, metadata=META)
    return r


def _names_of(rag, idx: list[int]) -> tuple[set[str], set[str], set[str]]:
    """(passage ids, entity names, fact texts) of the documents ``idx``."""
    r = rag.retriever
    g = r.graph
    pids = {chunk_id(CORPUS[i]) for i in idx}
    nodes = g.node_index(sorted(pids), entities=False)
    ctx = (g.kinds & KIND_CONTEXT) > 0
    ents = np.unique(g.src[ctx][np.isin(g.dst[ctx], nodes)])
    names = set(r.entity_texts([str(e) for e in g.node_ids[ents]]))
    st = rag.index_state
    facts = {" | ".join(t) for p in pids for t in st.passage_triples.get(p, ())}
    facts |= {h.text for p in pids for h in st.passage_hyperedges.get(p, ())}
    return pids, names, facts


def _assert_inside(rag, sol: QuerySolution, user: str) -> None:
    own, other = USERS[user], USERS["bob" if user == "alice" else "alice"]
    pids, names, facts = _names_of(rag, own)
    o_pids, o_names, o_facts = _names_of(rag, other)
    only_other_names, only_other_facts = o_names - names, o_facts - facts
    assert set(sol.passage_ids) <= pids
    assert all(ds and set(ds) <= {IDS[i] for i in own} for ds in sol.doc_ids)
    own_facts = {rag.retriever.facts.triple(f) for f in rag.index_state.db.passage_fact_ids(pids)}
    assert {tuple(t) for t in [*sol.candidate_facts, *sol.kept_facts]} <= own_facts
    assert not {n for n, _ in sol.seed_entities} & only_other_names
    other_texts = {CORPUS[i] for i in other} - {CORPUS[i] for i in own}
    other_titles = {"passage: " + t.split("\n", 1)[0][:80] for t in other_texts}
    assert not set(_strings(sol.to_dict())) & (only_other_names | only_other_facts | other_texts | other_titles)
    for e in sol.explanations:
        assert not {s.entity for s in e.seeds} & only_other_names
        for p in e.paths:
            assert not set(p.nodes) & only_other_names
            assert not any(n.startswith("passage: ") and n not in {f"passage: {CORPUS[i].split(chr(10))[0]}"
                                                                   for i in own} for n in p.nodes)
            for edge in p.edges:
                assert not set(edge.text) & only_other_facts


def _strings(data):
    """Every string in JSON-ready data (keys and values) but the query's own text."""
    if isinstance(data, str):
        yield data
    elif isinstance(data, dict):
        for k, v in data.items():
            yield k
            if k not in ("question", "query"):
                yield from _strings(v)
    elif isinstance(data, (list, tuple)):
        for v in data:
            yield from _strings(v)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("user", ["alice", "bob"])
def test_a_users_query_never_returns_anything_of_the_other(rag, mode, user):
    sols = rag.retrieve(QUERIES, 3, mode=mode, where={"user": user}, explain=True)
    for sol in sols:
        assert sol.docs
        _assert_inside(rag, sol, user)


def test_explanation_walks_hide_what_is_outside(rag):
    hidden = 0
    for user in ("alice", "bob"):
        for sol in rag.retrieve(QUERIES, 4, where={"user": user}, explain=True):
            for e in sol.explanations:
                for p in e.paths:
                    hidden += p.nodes.count(HIDDEN) + sum(edge.text.count(HIDDEN) for edge in p.edges)
                assert e.rank == sol.passage_ids.index(e.passage_id) + 1
                assert e.dense_rank <= len(USERS[user])                 # ranked among allowed passages
                if e.placed_by == "ppr":                                # the terms still add up
                    assert e.check < rag.config.ppr.ppr_tol
    assert hidden > 0          # the walks do cross the other user's part of the graph


@pytest.mark.parametrize("mode", ["hipporag2", "naive"])
def test_filter_applies_before_ranking_top_k_full(rag, mode):
    for user, idx in USERS.items():
        for sol in rag.retrieve(QUERIES, len(idx), mode=mode, where={"user": user}):
            assert sorted(sol.passage_ids) == sorted(chunk_id(CORPUS[i]) for i in idx)
            assert np.all(np.diff(np.asarray(sol.doc_scores)) <= 0)
        # a post-filter of the unfiltered ranking would come up short
        plain = rag.retrieve(QUERIES, len(idx), mode=mode)
        allowed = {chunk_id(CORPUS[i]) for i in idx}
        assert any(len(set(s.passage_ids) & allowed) < len(idx) for s in plain)


@pytest.mark.parametrize("mode", ["hipporag2", "naive"])
def test_a_filter_matching_everything_ranks_as_no_filter(rag, mode):
    plain = rag.retrieve(QUERIES, 5, mode=mode)
    every = rag.retrieve(QUERIES, 5, mode=mode, where={"time": {"$gte": 0}})
    for a, b in zip(plain, every, strict=True):
        assert a.passage_ids == b.passage_ids
        assert np.asarray(a.doc_scores).tobytes() == np.asarray(b.doc_scores).tobytes()
        assert a.candidate_facts == b.candidate_facts and a.seed_entities == b.seed_entities


def test_without_metadata_or_filter_rankings_are_unchanged(rag, tmp_path):
    """Metadata stored with the documents changes no ranking (a twin index without metadata)."""
    kw = {} if rag.config.extractor == "openie" else {"extractor": "ner"}
    twin = make_rag(tmp_path / "twin", use_filter=False, **kw)
    twin.index(CORPUS, ids=IDS)
    for mode in ("hipporag2", "naive"):
        for a, b in zip(rag.retrieve(QUERIES, 5, mode=mode), twin.retrieve(QUERIES, 5, mode=mode), strict=True):
            assert a.passage_ids == b.passage_ids
            assert np.asarray(a.doc_scores).tobytes() == np.asarray(b.doc_scores).tobytes()


def test_ranges_sets_and_combinations(rag):
    def docs(where):
        return sorted({d for s in rag.retrieve(QUERIES[:3], 8, where=where) for ds in s.doc_ids for d in ds})
    assert docs({"time": {"$gte": 20, "$lt": 50}}) == ["d2", "d3", "d4"]
    assert docs({"session": 1, "user": {"$in": ["bob", "carol"]}}) == ["d5", "d7"]
    assert docs({"$or": [{"time": 0}, {"time": {"$gt": 60}}]}) == ["d0", "d7"]
    assert docs({"user": {"$ne": "alice"}}) == [IDS[i] for i in USERS["bob"]]


def test_a_filter_matching_nothing_gives_empty_results(rag):
    where = {"user": "nobody"}
    for mode in MODES:
        sols = rag.retrieve(QUERIES[:2], 3, mode=mode, where=where)
        assert [s.docs for s in sols] == [[], []] and [s.doc_ids for s in sols] == [[], []]
    assert [c.passages for c in rag.retrieve_context(QUERIES[:2], "hi_local", where=where)] == [[], []]
    assert rag.explain(QUERIES[0], where=where) == []
    assert rag.retrieve(QUERIES[:1], 3, where=where, explain=True)[0].explanations == []


def test_contexts_and_explain_follow_the_filter(rag):
    pids, names, _ = _names_of(rag, USERS["alice"])
    for mode in ("hipporag2", "naive", "hi_local", "hi"):
        for ctx in rag.retrieve_context(QUERIES[:3], mode, num_to_retrieve=3, where={"user": "alice"}):
            assert ctx.passages and {chunk_id(p) for p in ctx.passages} <= pids
            assert set(ctx.sections) == {"passages"} and not ctx.path and not ctx.communities
            assert {n for n, _ in ctx.entities} <= names and (mode == "hipporag2" or not ctx.entities)
    bobs = chunk_id(CORPUS[1])
    with pytest.raises(ValueError, match="where filter allows"):
        rag.explain(QUERIES[1], passage_ids=[bobs], where={"user": "alice"})
    with pytest.raises(ValueError, match="where filter allows"):     # unknown ids get the same answer
        rag.explain(QUERIES[1], passage_ids=["chunk-nope"], where={"user": "alice"})
    [e] = rag.explain(QUERIES[1], passage_ids=[bobs], where={"user": "bob"})
    assert e.passage_id == bobs


def test_metadata_changes_move_documents_between_filters(tmp_path):
    rag = make_rag(tmp_path / "m", use_filter=False)
    rag.index(CORPUS, ids=IDS, metadata=META)
    before = rag.retrieve(QUERIES[:1], 8, where={"user": "alice"})[0]
    assert chunk_id(CORPUS[1]) not in before.passage_ids
    report = rag.index([CORPUS[1]], ids=["d1"], metadata=[{"user": "alice"}])
    assert report["documents"]["metadata_updated"] == ["d1"]
    after = rag.retrieve(QUERIES[:1], 8, where={"user": "alice"})[0]
    assert chunk_id(CORPUS[1]) in after.passage_ids
    rag.delete(ids=["d1"])
    assert rag.document_metadata(["d1"]) == {}
    assert chunk_id(CORPUS[1]) not in rag.retrieve(QUERIES[:1], 8, where={"user": "alice"})[0].passage_ids


def test_shared_passage_names_only_the_matching_document(tmp_path):
    rag = make_rag(tmp_path / "s", use_filter=False)
    rag.index([CORPUS[0], CORPUS[0], CORPUS[2]], ids=["a", "b", "c"],
              metadata=[{"user": "alice"}, {"user": "bob"}, {"user": "alice"}])
    sols = rag.retrieve(["Who mapped Lake Veloria?"], 2, where={"user": "bob"})
    assert sols[0].passage_ids == [chunk_id(CORPUS[0])] and sols[0].doc_ids == [["b"]]


def test_bad_filters_are_clear_errors(rag):
    with pytest.raises(ValueError, match="unknown operator '\\$like'"):
        rag.retrieve(QUERIES[:1], where={"user": {"$like": "a%"}})
    with pytest.raises(ConfigError, match="must be an object"):
        QueryParam(where="user = alice")
    with pytest.raises(ValueError, match="metadata key"):
        rag.rag_qa(QUERIES[:1], where={"a b": 1})


# ---------------------------------------------------------------------------------------- the pieces
def test_rows_in_sorted_ids_of_both_kinds():
    ids = np.array(sorted(["f-b", "f-a", "f-é", "f-c"]), dtype=object)
    assert _rows_in(ids, ["f-c", "zz", "f-é", "f-c"]).tolist() == [2, 3]
    as_bytes = np.array([i.encode() for i in ids], dtype="S")
    assert _rows_in(as_bytes, ["f-é", "f-a"]).tolist() == [0, 3]
    assert _rows_in(ids, []).tolist() == []


def test_context_solutions_and_document_ids():
    a, b, c = "A\nalpha", "B\nbeta", "C\ngamma"
    ctx = HiContext(query="q", mode="hi_local", passages=[a, b, c], entities=[("x", 1.0)], path=["x"])
    [sol] = context_solutions([ctx], frozenset({chunk_id(a), chunk_id(c)}), 5)
    assert sol.docs == [a, c] and sol.passage_ids == [chunk_id(a), chunk_id(c)] and not sol.seed_entities
    assert np.asarray(sol.doc_scores).tolist() == [1.0, 0.5]
    sol.doc_ids = [["d1", "d2"], ["d3"]]
    keep_matching_documents([sol], frozenset({"d2", "d3"}))
    assert sol.doc_ids == [["d2"], ["d3"]]


@pytest.mark.slow
def test_real_models_ner_index_two_users(tmp_path):
    """The bundled sample corpus on the real encoder and spaCy (``extractor="ner"``, no LLM), its
    documents split between two users: each user's queries stay inside, top-k full."""
    import json
    from importlib.resources import files

    from hippo_engine import HippoRAG
    data = json.loads(files("hippo_engine.data").joinpath("sample_corpus.json").read_text())
    docs = [f"{d['title']}\n{d['text']}" for d in data["corpus"]]
    users = ["alice" if i % 2 == 0 else "bob" for i in range(len(docs))]
    rag = HippoRAG(tmp_path, extractor="ner", show_progress=False)
    rag.index(docs, ids=[f"s{i}" for i in range(len(docs))], metadata=[{"user": u} for u in users])
    questions = [q["question"] for q in data["questions"]]
    for user in ("alice", "bob"):
        own = {chunk_id(d) for d, u in zip(docs, users, strict=True) if u == user}
        own_facts = {rag.retriever.facts.triple(f) for f in rag.index_state.db.passage_fact_ids(own)}
        for mode in ("hipporag2", "naive"):
            for sol in rag.retrieve(questions, len(own), mode=mode, where={"user": user}, explain=mode == "hipporag2"):
                assert set(sol.passage_ids) == own
                assert {tuple(t) for t in sol.candidate_facts} <= own_facts
                assert all(e.passage_id in own for e in sol.explanations)
    rag.close()


def _restriction(rows, n):
    rows = np.asarray(rows, np.int64)
    empty = SubsetSearch(MatrixSearch(np.zeros((0, 4), np.float32)), np.zeros(0, np.int64))
    return Restriction(frozenset(), rows, np.setdiff1d(np.arange(n), rows), frozenset(), empty, np.zeros(0, np.int64),
                       MatrixSearch(np.zeros((0, 4), np.float32), ids=np.zeros(0, dtype=object)))


@pytest.mark.parametrize("rows", [[1, 3, 4], [2], [0, 1, 2, 3, 4, 5]])
def test_restriction_seeds_and_ranks_as_a_memory_of_the_allowed_rows(rows):
    rng = np.random.default_rng(len(rows))
    dense = rng.standard_normal((6, 2)).astype(np.float32)
    probs = rng.random(6)
    res = _restriction(rows, 6)
    seeds = passage_seeds(res.seed_dense(dense), 0.05)
    seeds[res.blocked_rows] = 0.0                                      # what block_seeds does to the reset
    want = np.zeros((6, 2))
    want[rows] = 0.05 * min_max(dense[rows].astype(np.float64))
    assert seeds.tobytes() == want.tobytes()
    got_rows, got_scores = res.graph_rank(probs, dense[:, 0], 1, 2)
    sub = probs[rows]
    order = top_k(sub, 2)
    o, sc = dense_first(order, sub[order], dense[rows, 0], 1, 2)
    assert got_rows.tolist() == np.asarray(rows)[o].tolist() and got_scores.tolist() == sc.tolist()
    assert set(got_rows.tolist()) <= set(rows) and len(got_rows) == min(2, len(rows))
    masked = res.masked(probs)
    assert np.isneginf(masked[res.blocked_rows]).all() and (masked[rows] == probs[rows]).all()


def test_an_empty_restriction_ranks_nothing():
    res = _restriction([], 4)
    assert res.empty and res.graph_rank(np.ones(4), np.ones(4), 2, 3)[0].tolist() == []
