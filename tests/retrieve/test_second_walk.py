"""The second walk's plumbing (retrieve/second/second_walk.py): one fact search for both walks, queries whose
second reset equals the first keep their first walk without walking again, a known ner index is not read
to check it holds hyperedges; on the toy ner index (fake encoder, real spaCy) the scores equal a plain
second walk's."""
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pytest
from helpers import CORPUS, make_rag

from hippo_engine.config import QueryParam
from hippo_engine.retrieve.retriever import Retriever
from hippo_engine.retrieve.second.fusion import make_fusion
from hippo_engine.retrieve.second.second_hop import SecondHop, WideHop
from hippo_engine.retrieve.second.second_walk import SecondWalk, reuse_top

QUERIES = ["Where was the geologist who founded Tamsin College from?", "Who mapped Lake Veloria?",
           "Which fair is held in Velor?"]


def test_reuse_top_serves_narrower_searches_and_falls_back():
    rows, scores = np.array([[4, 2, 9], [1, 3, 5]]), np.array([[1.0, 0.5, 0.2], [1.0, 0.7, 0.1]])
    asked = []
    search = reuse_top((rows, scores), lambda q, k: asked.append(k) or ("fresh", k))
    r, s = search(np.zeros((2, 8)), 2)
    assert r.tolist() == [[4, 2], [1, 3]] and s.tolist() == [[1.0, 0.5], [1.0, 0.7]] and asked == []
    assert search(np.zeros((2, 8)), 4) == ("fresh", 4) and search(np.zeros((3, 8)), 1) == ("fresh", 1)


@pytest.fixture(scope="module")
def rag(tmp_path_factory):
    r = make_rag(tmp_path_factory.mktemp("ner"), extractor="ner")
    r.index(CORPUS)
    yield r
    r.close()


def _search(r: Retriever, rag):
    q_fact, q_pass = rag.encode_queries(QUERIES)
    ner = rag.searches.hipporag2._query_ner(QUERIES, {})
    return r.search(QUERIES, q_fact, q_pass, 10, None, ner)[0]


@dataclass(frozen=True)
class SameSeeds(SecondHop):
    """A second walk seeded exactly like the first."""

    name: ClassVar[str] = "same"
    needs_hop: ClassVar[bool] = False

    def second_resets(self, ctx, block, cols, resets, first):
        return resets.copy()

    def describe(self):
        return "the first walk's seeds again"


def test_unchanged_seeds_keep_the_first_walk_without_walking(rag):
    r = Retriever.from_index(rag.config.replace(second_hop="none", dense_weight=0.0), rag.index_state)
    one = _search(r, rag)
    hop = SameSeeds(keep_head=2)
    r._second = SecondWalk(hop, r, None, "ner")
    r.fusion = make_fusion(r.config, True)            # the one score of a second walk: walk + head terms
    walked = []
    run = r.run_ppr
    r.run_ppr = lambda R, priors=None: walked.append(R.shape[1]) or run(R, priors)
    same = _search(r, rag)
    assert len(walked) == 1                      # the first walk only
    for a, b in zip(one, same, strict=True):
        if a.used_fallback:
            continue
        assert a.order.tolist() == b.order.tolist()     # the same walk twice: its head term keeps its order
        probs = np.zeros(len(rag.retriever.passage_nodes))
        probs[a.order] = a.scores                      # (every passage: the walk reaches all of this toy graph)
        want = r.fusion.score(probs, np.zeros_like(probs), probs)
        assert np.allclose(b.scores, want[b.order], rtol=1e-12, atol=0)


def test_the_default_second_walk_equals_a_plain_one(rag, monkeypatch):
    """One fact search and the skip give the scores of the strategy's own walk (refine)."""
    r = Retriever.from_index(rag.config, rag.index_state)
    assert isinstance(r.second_hop, WideHop) and r.dense_agree == 0 and r.fusion is not None
    searched = []
    top = r.top_facts
    monkeypatch.setattr(r, "top_facts", lambda q, k: searched.append(k) or top(q, k))
    got = _search(r, rag)
    assert searched == [2]                       # once per block, wide enough for both walks
    plain = Retriever.from_index(rag.config, rag.index_state)
    plain._second = None                         # the first walk alone, then the strategy by hand below
    q_fact, q_pass = rag.encode_queries(QUERIES)
    ner = rag.searches.hipporag2._query_ner(QUERIES, {})
    from hippo_engine.retrieve.facts.linking import Block
    block = Block(0, len(QUERIES), q_fact, plain.dense_scores(q_pass), plain.top_facts(q_fact, 1),
                  np.ones((len(QUERIES), 1), bool), list(ner), [])
    links = plain.linking.links(plain.link_graph, block)
    cols = np.flatnonzero(links.linked(len(QUERIES)))
    R, _ = plain.linking.resets(plain.link_graph, links, block, cols)
    first = plain.run_ppr(R)
    ctx = SecondWalk(WideHop(keep_head=2), plain, None, "ner").context(plain.link_graph, None, links)
    _, second = WideHop(keep_head=2).walk(ctx, block, cols, R, first)
    want = plain.fusion.score(second, block.dense[:, cols], first)
    results = _search(Retriever.from_index(rag.config, rag.index_state), rag)        # the default: "solve"
    updated = _search(Retriever.from_index(rag.config.replace(second_walk_solver="update"), rag.index_state), rag)
    assert len(cols)
    for c, j in enumerate(cols.tolist()):
        assert np.array_equal(results[j].scores, want[results[j].order, c])     # "solve": bit-identical
        # "update" (retrieve/ppr/walk_update.py): the same scores within the push's bound, d r_max s(v)
        # (here about 1e-7, the order of the kernel's own float32 tolerance), over the walk's largest
        # probability in the score's walk term (here about 0.05): within 1e-5
        assert np.allclose(updated[j].scores, want[updated[j].order, c], rtol=0, atol=1e-5)
        assert updated[j].order.tolist() == got[j].order.tolist() or got[j].order[0] != updated[j].order[0]


def test_a_known_ner_index_is_not_read_to_check_it(rag):
    calls = []
    r = Retriever.from_index(rag.config, rag.index_state)
    r._second = SecondWalk(WideHop(), r, lambda: calls.append(1) or {}, "ner")
    _search(r, rag)
    assert calls == []
    r._second = SecondWalk(WideHop(), r, lambda: calls.append(1) or {}, None)    # unknown: read, and refused
    with pytest.raises(ValueError, match="hyperedges"):
        _search(r, rag)


def test_explanations_on_the_toy_ner_index_follow_the_walks(rag):
    sols = rag.retrieve(QUERIES, 5, param=QueryParam(use_filter=False), explain=True)
    placed = {e.placed_by for s in sols for e in s.explanations}
    assert placed <= {"score", "dense_fallback"} and "score" in placed
