"""kb_vector, kb_graph, kb_hybrid, kb_global (hippo_engine.kb) on the toy index with fakes: what each
ranks, score_threshold and limit, the hop count, fusion, communities' documents, where=."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from fakes import NoCallLLM
from helpers import CORPUS

from hippo_engine.config import QueryParam
from hippo_engine.kb.base import Ranked
from hippo_engine.kb.graph import reach
from hippo_engine.kb.hybrid import fuse

sys.path.insert(0, str(Path(__file__).parents[1] / "graphrag"))
from peer_fakes import QUERIES, built_rag  # noqa: E402

KB = ("kb_vector", "kb_graph", "kb_hybrid", "kb_global")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    rag, _ = built_rag(tmp_path_factory.mktemp("kb"))
    rag._llm = NoCallLLM()
    return rag


def test_kb_vector_is_the_dense_ranking_cut_at_the_threshold(built):
    rag = built
    dense = rag.retrieve(QUERIES, mode="naive")
    vec = rag.retrieve(QUERIES, mode="kb_vector")
    for d, v in zip(dense, vec, strict=True):
        assert v.docs == d.docs
        cos = rag.encoder.encode(v.docs) @ rag.encoder.encode([v.question])[0]   # raw cosines (naive: min-max)
        assert np.allclose(v.doc_scores, cos, atol=1e-5)
    cut = rag.retrieve(QUERIES, param=QueryParam(mode="kb_vector", score_threshold=0.3, top_k=3))
    for c, v in zip(cut, vec, strict=True):
        assert len(c.docs) <= 3 and all(s >= 0.3 for s in c.doc_scores)
        assert c.docs == [d for d, s in zip(v.docs, v.doc_scores, strict=True) if s >= 0.3][:3]
    assert rag.retrieve(QUERIES[:1], param=QueryParam(mode="kb_vector", score_threshold=1.0))[0].docs == []


def test_kb_graph_expands_the_seeds_by_hops(built):
    rag = built
    eng = rag.hirag.engine(need_communities=False)
    counts = []
    for hops in (0, 1, 2):
        rag2 = rag.__class__(rag.save_dir, llm=NoCallLLM(), encoder=rag.encoder, show_progress=False,
                             synonymy_threshold=0.6, max_cluster_size=3, use_filter=False, kb_hops=hops)
        sol = rag2.retrieve(QUERIES[:1], mode="kb_graph")[0]
        counts.append(len(sol.docs))
        seeds = [n for n, _ in sol.seed_entities]
        assert 0 < len(seeds) <= rag.config.kb.kb_seed_entities
        assert list(sol.doc_scores) == sorted(sol.doc_scores, reverse=True)
        if hops == 0:
            nodes = [eng.graph.index_of[e] for e in eng.graph.node_ids[:eng.graph.num_entities]
                     if eng.name(eng.graph.index_of[e]) in seeds]
            mention = {eng.passage_text(p) for n in nodes for p in eng.ent_passages[n]}
            assert set(sol.docs) == mention
    assert counts == sorted(counts) and counts[0] < counts[-1]


def test_reach_counts_hops_breadth_first():
    class G:
        neighbors = [[1], [0, 2], [1, 3], [2], []]
    assert reach(G, [0], 2) == {0: 0, 1: 1, 2: 2}
    assert reach(G, [0, 4], 0) == {0: 0, 4: 0}
    assert reach(G, [], 3) == {}


def test_fuse_puts_what_both_find_first():
    out = fuse([Ranked([1, 2, 3], [0.9, 0.8, 0.7]), Ranked([3, 4], [0.5, 0.4])], k=60)
    assert out.nodes == [3, 1, 2, 4]
    assert out.scores[0] == pytest.approx(1 / 63 + 1 / 61)
    assert fuse([Ranked([], []), Ranked([], [])], 60).nodes == []


def test_kb_hybrid_is_the_union_of_vector_and_graph(built):
    rag = built
    for q in QUERIES:
        vec, graph, hyb = (rag.retrieve([q], mode=m)[0] for m in ("kb_vector", "kb_graph", "kb_hybrid"))
        assert set(hyb.docs) == set(vec.docs) | set(graph.docs) and len(hyb.docs) == len(set(hyb.docs))
        both = [d for d in hyb.docs if d in graph.docs]
        assert hyb.docs[0] in both or not both


def test_kb_global_returns_the_nearest_communities_documents(built):
    rag = built
    cset = rag.hirag.communities()
    for q in QUERIES:
        sol = rag.retrieve([q], mode="kb_global")[0]
        sims = cset.matrix() @ rag.encoder.encode([q])[0]
        best = [cset.communities[i] for i in np.argsort(-sims, kind="stable")[:rag.config.kb.kb_communities]]
        members = {p for c in best for p in c.passages}
        assert sol.docs and set(sol.passage_ids) <= members
        assert sol.passage_ids[: len(best[0].passages)] == best[0].passages[: len(sol.passage_ids)]


@pytest.mark.parametrize("mode", KB)
def test_kb_modes_limit_where_and_contexts(tmp_path, mode):
    from fakes import ScriptedLLM
    from helpers import make_rag
    from peer_fakes import PeerResponder
    rag = make_rag(tmp_path, llm=ScriptedLLM(PeerResponder()), max_cluster_size=3, use_filter=False)
    rag.index(CORPUS, ids=[f"d{i}" for i in range(len(CORPUS))],
              metadata=[{"user": "alice" if i % 2 == 0 else "bob"} for i in range(len(CORPUS))])
    rag.build_communities()
    rag._llm = NoCallLLM()
    alice = {CORPUS[i] for i in range(0, len(CORPUS), 2)}
    assert all(len(s.docs) <= 2 for s in rag.retrieve(QUERIES, param=QueryParam(mode=mode, top_k=2)))
    sols = rag.retrieve(QUERIES, mode=mode, where={"user": "alice"})
    assert all(set(s.docs) <= alice for s in sols) and any(s.docs for s in sols)
    assert all(int(d[1:]) % 2 == 0 for s in sols for ds in s.doc_ids for d in ds)
    ctx = rag.retrieve_context(QUERIES[:1], mode=mode)[0]
    assert tuple(ctx.sections) == ("passages",) and ctx.passages == rag.retrieve(QUERIES[:1], mode=mode)[0].docs
