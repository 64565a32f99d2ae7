"""Explanations through the facade (fake LLM and encoder): explain=True leaves every ranking and score
unchanged, the terms add up to the score, every extractor is covered, and an explanation always
serialises to JSON and round-trips (hypothesis)."""
import json

import numpy as np
import pytest
from helpers import CORPUS, make_rag
from hypothesis import given, settings
from hypothesis import strategies as st

from hippo_engine.config import QueryParam
from hippo_engine.datatypes import ExplainedPath, Explanation, PathEdge, SeedTerm

QUERIES = ["Where was the geologist who founded Tamsin College from?",
           "Who mapped Lake Veloria?", "Which fair is held in Velor?", "zzzz qqqq"]
NOFILTER = QueryParam(use_filter=False)


@pytest.fixture(scope="module", params=["openie", "ner", "nary"])
def rag(request, tmp_path_factory):
    kw = {} if request.param == "openie" else {"extractor": request.param}
    if request.param == "nary":
        from helpers import ScriptedLLM
        nary = {"segments": [{"text": "Oren Pike founded Tamsin College.",
                              "entities": ["Oren Pike", "Tamsin College"]}]}
        kw["llm"] = ScriptedLLM(lambda m: json.dumps(nary))
    r = make_rag(tmp_path_factory.mktemp(request.param), **kw)
    r.index(CORPUS)
    return r


def _ranking(sols):
    return [(s.passage_ids, np.asarray(s.doc_scores).tolist()) for s in sols]


def test_explain_leaves_rankings_and_sums_check(rag):
    plain = rag.retrieve(QUERIES, 5, param=QueryParam(use_filter=False))
    explained = rag.retrieve(QUERIES, 5, param=QueryParam(use_filter=False), explain=True)
    assert _ranking(plain) == _ranking(explained)
    assert all(not s.explanations for s in plain)
    tol = rag.config.ppr.ppr_tol
    second = rag.retriever.config.second_hop != "none"
    assert second == (rag.index_state.extractor == "ner")          # "auto": the second hop on a ner index only
    for sol in explained:
        assert [e.passage_id for e in sol.explanations] == sol.passage_ids
        assert [e.rank for e in sol.explanations] == list(range(1, len(sol.passage_ids) + 1))
        for e, score in zip(sol.explanations, np.asarray(sol.doc_scores), strict=True):
            assert e.ranked_score == pytest.approx(float(score), abs=0)
            if e.placed_by == "dense_fallback":
                assert sol.used_fallback and e.fallback_reason and not e.walk
                continue
            total = sum(s.contribution for s in e.seeds) + e.dense_prior + e.dense_term
            assert abs(total - e.score) == pytest.approx(e.check, abs=1e-15)
            # the one score's walk terms are probabilities over the walk's largest: the solver's tolerance scaled so
            assert e.check < (tol if e.placed_by == "ppr" else 1e-4)
            assert sum(p.share for p in e.paths) <= 1 + 1e-9
            assert bool(e.walk) == second
            if e.placed_by == "ppr":          # the walk's score is the score it was ranked by
                assert e.score == float(score) and not second
            elif e.placed_by == "score":      # the one score (second walk, head and dense terms) as ranked
                assert second and "second walk" in e.walk and "first walk" in e.walk
                assert e.score == pytest.approx(float(score), rel=1e-12)
            else:
                assert e.placed_by == "dense_agree" and e.rank == 1 and e.dense_rank == 1
            json.dumps(sol.to_dict())


def test_rag_explain_top_and_chosen_passages(rag):
    exps = rag.explain(QUERIES[0], top=3, param=NOFILTER)
    assert 1 <= len(exps) <= 3
    sol = rag.retrieve([QUERIES[0]], 3, param=NOFILTER)[0]
    assert [e.passage_id for e in exps] == sol.passage_ids[:len(exps)]
    last = rag.retriever.views.passages.store.ids[-1]
    chosen = rag.explain(QUERIES[0], passage_ids=[str(last)], param=NOFILTER)
    assert chosen[0].passage_id == str(last) and chosen[0].rank >= 1
    with pytest.raises(ValueError):
        rag.explain(QUERIES[0], passage_ids=["chunk-nope"])


def test_paths_carry_fact_text(rag):
    exps = [e for e in rag.explain(QUERIES[0], top=5, param=NOFILTER) if e.paths]
    if rag.index_state.extractor == "nary":
        return
    assert exps, "some passage is reached by a walk"
    p = exps[0].paths[0]
    assert p.nodes[0] == p.edges[0].source and len(p.edges) == len(p.nodes) - 1
    assert any(e.text for x in exps for path in x.paths for e in path.edges)


finite = st.floats(allow_nan=False, allow_infinity=False, width=64)
text = st.text(max_size=20)
edges = st.builds(PathEdge, text, text, st.sampled_from(["fact", "context", "synonymy", "fact+synonymy"]),
                  finite, st.lists(text, max_size=2))
paths = st.builds(ExplainedPath, st.lists(text, max_size=4), st.lists(edges, max_size=3), finite, finite, finite)
seeds = st.builds(SeedTerm, text, finite, finite, finite, st.sampled_from(["entity", "community"]))
explanations = st.builds(
    Explanation, passage_id=text, score=finite, seeds=st.lists(seeds, max_size=4), dense_prior=finite,
    paths=st.lists(paths, max_size=3), dense_score=finite, dense_rank=st.integers(1, 10 ** 6),
    rank=st.integers(1, 10 ** 6), ranked_score=finite, check=finite,
    placed_by=st.sampled_from(["ppr", "dense_first", "dense_agree", "second_hop_head", "dense_fallback"]),
    walk=text, used_fallback=st.booleans(),
    fallback_reason=text, candidate_facts=st.lists(st.fixed_dictionaries(
        {"fact": st.lists(text, min_size=3, max_size=3), "score": finite, "kept": st.booleans()}), max_size=3),
    query=text)


@settings(max_examples=200, deadline=None)
@given(explanations)
def test_explanation_json_round_trip(e):
    data = json.loads(json.dumps(e.to_dict(), allow_nan=False))
    assert Explanation.from_dict(data) == e
    assert Explanation.from_dict(data).to_dict() == e.to_dict()
