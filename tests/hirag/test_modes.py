"""Community summary nodes in the PPR graph and HiRAG's retrieval modes (hippo_engine.hirag)."""
import igraph as ig
import numpy as np
import pytest
from fakes import NoCallLLM, ScriptedLLM
from helpers import CORPUS, make_rag
from test_communities import CountingResponder, world_corpus

from hippo_engine.config import MODES, QueryParam
from hippo_engine.hirag.clustering import entity_igraph
from hippo_engine.hirag.context import HiContext, dedupe, find_path_with_required_nodes, pack_by_tokens
from hippo_engine.hirag.seeds import CommunitySeeds, augment_graph, community_seeds
from hippo_engine.index.graph import KIND_FACT, GraphData
from hippo_engine.modes import mode_names, mode_spec

HI_MODES = tuple(m for m in mode_names() if m == "hi" or m.startswith("hi_"))

QUERIES = ["Who founded Tamsin College?", "Where was Ilse Marrow born?", "What is the capital of Kaldavia?"]


@pytest.fixture
def built(tmp_path):
    """The toy corpus indexed, with communities (max cluster size 3: two levels)."""
    resp = CountingResponder()
    rag = make_rag(tmp_path, llm=ScriptedLLM(resp), max_cluster_size=3, use_filter=False)
    rag.index(CORPUS)
    rag.build_communities()
    return rag, resp


def visits_in_order(path, required) -> bool:
    """True when ``required`` is a subsequence of ``path``."""
    it = iter(path)
    return all(any(v == r for v in it) for r in required)


# ------------------------------------------------------------------ bridge
def test_bridge_path_visits_required_nodes_in_order():
    # 0-1-2-3-4 chain, 2-5-6 branch, 7-8 a separate component
    g = ig.Graph(n=9, edges=[(0, 1), (1, 2), (2, 3), (3, 4), (2, 5), (5, 6), (7, 8)])
    path = find_path_with_required_nodes(g, [0, 6, 4])
    assert path == [0, 1, 2, 5, 6, 5, 2, 3, 4]
    assert visits_in_order(path, [0, 6, 4]) and not visits_in_order(path, [0, 4, 6, 4])
    for a, b in zip(path, path[1:], strict=False):
        assert g.are_adjacent(a, b)
    # an unreachable required node is jumped to, the walk goes on from there
    assert find_path_with_required_nodes(g, [0, 2, 8, 7]) == [0, 1, 2, 8, 7]
    # empty and single key lists do not crash
    assert find_path_with_required_nodes(g, []) == []
    assert find_path_with_required_nodes(g, [3]) == [3]
    assert find_path_with_required_nodes(g, [3, 3]) == [3]


def test_bridge_is_built_from_graphdata_arrays_and_key_order_is_deterministic(built):
    rag, _ = built
    gd = rag.index_state.graph
    g = entity_igraph(gd)
    assert g.vcount() == gd.num_entities
    ent = (gd.src < gd.num_entities) & (gd.dst < gd.num_entities)
    assert g.ecount() == int(ent.sum())
    eng = rag.hirag.engine(need_communities=True)
    overall = [e for e, _ in eng.top_entities(rag.encoder.encode(["Oren Pike"])[0], 50)]
    comms = eng.top_communities(overall[:5])
    keys = eng.key_entities(comms, overall, 2)
    assert keys == eng.key_entities(comms, overall, 2)              # deterministic
    assert keys == dedupe(keys)                                      # no repeats
    # keys follow the community order, and within one community the entity rank order
    first = [e for e in overall if e in eng.member_sets[comms[0]]][:2]
    assert keys[:len(first)] == first
    path, pairs = eng.bridge(keys)
    assert visits_in_order(path, keys) and path[0] == keys[0] and path[-1] == keys[-1]
    assert eng.bridge([]) == ([], [])
    assert eng.key_entities([], overall, 3) == overall[:3]


# ------------------------------------------------------------------ contexts per mode
def test_retrieve_context_sections_and_budgets(tmp_path):
    resp = CountingResponder()
    budgets = dict(hi_text_unit_tokens=40, hi_local_context_tokens=30, hi_bridge_tokens=20, hi_report_tokens=25)
    rag = make_rag(tmp_path, llm=ScriptedLLM(resp), max_cluster_size=3, use_filter=False, **budgets)
    rag.index(CORPUS)
    rag.build_communities()
    rag._llm = NoCallLLM()   # contexts need no LLM
    for mode in ("hipporag2", "naive", *HI_MODES):      # the graphrag_*/kb_* budgets: tests/graphrag, tests/kb
        ctxs = rag.retrieve_context(QUERIES, mode=mode)
        assert len(ctxs) == len(QUERIES) and all(isinstance(c, HiContext) for c in ctxs)
        for c in ctxs:
            assert tuple(c.sections) == mode_spec(mode).sections, mode
            assert c.tokens["passages"] <= budgets["hi_text_unit_tokens"]
            if "reports" in c.sections:
                assert c.tokens["reports"] <= budgets["hi_report_tokens"]
            if "bridge" in c.sections:
                assert c.tokens["bridge"] <= budgets["hi_bridge_tokens"]
            if "entities" in c.sections:
                assert c.tokens["entities"] + c.tokens.get("relations", 0) <= budgets["hi_local_context_tokens"]
            for _name in c.sections:
                assert "-----" in c.text
            assert c.sections["passages"].startswith("Wikipedia Title: ") or not c.sections["passages"]
        # the same through QueryParam: no answer, no LLM call
        again = rag.retrieve_context(QUERIES, param=QueryParam(mode=mode))
        assert [c.text for c in again] == [c.text for c in ctxs]


def test_contexts_hold_what_their_mode_promises(built):
    rag, _ = built
    rag._llm = NoCallLLM()
    q = ["Who founded Tamsin College?"]
    local = rag.retrieve_context(q, mode="hi_local")[0]
    assert "tamsin college" in local.sections["entities"]
    assert " | " in local.sections["relations"]
    glob = rag.retrieve_context(q, mode="hi_global")[0]
    assert glob.communities and glob.sections["reports"].startswith("# About")
    bridge = rag.retrieve_context(q, mode="hi_bridge")[0]
    assert bridge.path and bridge.key_entities and " | " in bridge.sections["bridge"]
    hi = rag.retrieve_context(q, mode="hi")[0]
    assert hi.sections["reports"] and hi.sections["bridge"] and hi.sections["entities"]
    naive = rag.retrieve_context(q, mode="naive")[0]
    dpr = rag.retrieve_dpr(q)[0]
    assert naive.passages[: len(dpr.docs)] == dpr.docs[: len(naive.passages)]


def test_modes_return_solutions_with_metrics(built):
    rag, _ = built
    gold = [[CORPUS[3]]]
    for mode in MODES:
        sols, metrics = rag.retrieve(QUERIES[:1], mode=mode, gold_docs=gold)
        assert sols[0].docs and 0.0 <= metrics["Recall@5"] <= 1.0, mode
        assert len(sols[0].docs) == len(set(sols[0].docs))


def test_rag_qa_in_hi_modes_reads_the_context(built):
    rag, _ = built
    seen = []

    def reader(messages):
        seen.append(messages[-1]["content"])
        return "Thought: easy.\nAnswer: Oren Pike"

    rag._llm = ScriptedLLM(reader)
    sols, responses, meta, rm, qm = rag.rag_qa(QUERIES[:1], mode="hi", gold_docs=[[CORPUS[3]]],
                                               gold_answers=[["Oren Pike"]])
    assert sols[0].answer == "Oren Pike" and qm["ExactMatch"] == 1.0
    assert "-----Backgrounds-----" in seen[0] and "-----Reasoning Path-----" in seen[0]
    assert seen[0].rstrip().endswith("Thought:")
    assert meta[0]["context_tokens"]["passages"] > 0


def test_unknown_mode_is_refused(built):
    rag, _ = built
    with pytest.raises(ValueError, match="hi_bridge"):
        rag.retrieve(QUERIES, mode="global")


def test_modes_needing_communities_build_them_when_missing_without_llm_calls(tmp_path, caplog):
    resp = CountingResponder()
    rag = make_rag(tmp_path, llm=ScriptedLLM(resp), max_cluster_size=3, use_filter=False)
    rag.index(CORPUS)
    rag.retrieve_context(QUERIES[:1], mode="hi_local")
    assert resp.report_calls == 0                     # hi_local needs no communities
    with caplog.at_level("WARNING"):
        rag.retrieve_context(QUERIES[:1], mode="hi_global")
    assert resp.report_calls == 0                     # a query writes no LLM report as a side effect
    assert "no LLM reports (community_auto_llm_reports=0)" in caplog.text
    assert {r.source for r in rag.hirag.communities().reports.values()} == {"listing"}
    summary = rag.build_communities()                 # the explicit call writes them
    assert resp.report_calls == summary["communities"] and summary["reports"]["listings"] == 0
    capped = CountingResponder()
    rag3 = make_rag(tmp_path / "c", llm=ScriptedLLM(capped), max_cluster_size=3, use_filter=False,
                    community_auto_llm_reports=2)
    rag3.index(CORPUS)
    rag3.retrieve_context(QUERIES[:1], mode="hi_global")
    assert capped.report_calls == 2                   # an explicit cap is honoured
    rag2 = make_rag(tmp_path / "b", llm=ScriptedLLM(resp), community_auto_update=False)
    rag2.index(CORPUS)
    with pytest.raises(RuntimeError, match="build_communities"):
        rag2.retrieve_context(QUERIES[:1], mode="hi_global")


# ------------------------------------------------------------------ summary nodes
def _rankings(rag, queries=QUERIES):
    return [(s.docs, np.asarray(s.doc_scores).tolist()) for s in rag.retrieve(queries)]


def test_community_nodes_off_gives_exactly_hipporag2(tmp_path, built):
    rag, _ = built
    plain = make_rag(tmp_path / "plain", use_filter=False)
    plain.index(CORPUS)
    assert rag.retriever.seed_sources == []
    assert _rankings(rag) == _rankings(plain)
    assert [s.docs for s in rag.retrieve(QUERIES, mode="hipporag2")] == [s.docs for s in plain.retrieve(QUERIES)]
    # the same holds on a bigger corpus with several worlds
    docs, _ = world_corpus()
    a = make_rag(tmp_path / "wa", llm=ScriptedLLM(CountingResponder()), max_cluster_size=4, use_filter=False)
    b = make_rag(tmp_path / "wb", use_filter=False)
    a.index(docs)
    b.index(docs)
    a.build_communities()
    qs = [d.split("\n")[1][:40] for d in docs[::4]]
    assert _rankings(a, qs) == _rankings(b, qs)


def test_community_nodes_on_adds_nodes_and_seeds(built, tmp_path):
    rag, resp = built
    on = make_rag(rag.save_dir, llm=ScriptedLLM(resp), max_cluster_size=3, use_filter=False,
                  use_community_nodes=True, community_seed_weight=0.5)
    r = on.retriever
    assert len(r.seed_sources) == 1 and isinstance(r.seed_sources[0], CommunitySeeds)
    n_comm = len(rag.communities.communities)
    base = rag.index_state.graph
    assert r.graph.num_nodes == base.num_nodes + n_comm
    members = sum(c.size for c in rag.communities.communities)
    parents = sum(1 for c in rag.communities.communities if c.parent)
    assert len(r.graph.src) == len(base.src) + members + parents
    sols = on.retrieve(QUERIES)
    assert all(sorted(s.docs) == sorted(CORPUS) for s in sols)      # still ranks every passage, only passages
    # a dense-fallback query goes through the sliced dense ranking
    q = on.encoder.encode(["Brask"])
    res, _ = r.search(["x"], q, q, 3, filter_many=lambda questions, cands: [[] for _ in questions])
    assert res[0].used_fallback and len(res[0].order) == 3 and res[0].order.max() < len(CORPUS)
    # zero weights: isolated, unseeded community nodes leave the ranking order as HippoRAG 2's
    zero = make_rag(rag.save_dir, llm=ScriptedLLM(resp), max_cluster_size=3, use_filter=False,
                    use_community_nodes=True, community_seed_weight=0.0, community_entity_weight=0.0,
                    community_parent_weight=0.0)
    assert [s.docs for s in zero.retrieve(QUERIES)] == [s.docs for s in rag.retrieve(QUERIES)]


def test_pure_helpers():
    assert pack_by_tokens(["a b", "c", "d e f"], lambda t: len(t.split()), 3) == ["a b", "c"]
    assert pack_by_tokens(["a b c d"], lambda t: len(t.split()), 3) == []
    s = community_seeds(np.array([0.1, 0.9, 0.5, 0.9]), 0.2, 2)
    assert s.tolist() == [0.0, 0.2, 0.0, 0.2]
    assert community_seeds(np.array([0.3]), 0.0, 5).tolist() == [0.0]
    assert dedupe([3, 1, 3, 2, 1]) == [3, 1, 2]
    gd = GraphData(np.array(["entity-a", "entity-b", "chunk-p"], dtype=object), 2, np.array([0, 0]),
                   np.array([1, 2]), np.array([2.0, 1.0]), np.array([KIND_FACT, 2], np.uint8))
    from hippo_engine.hirag.clustering import Community
    c = Community(id="community-x", level=0, entities=["entity-a", "entity-b", "entity-gone"])
    aug = augment_graph(gd, [c], 0.5, 1.0)
    assert aug.num_nodes == 4 and aug.node_ids[-1] == "community-x"
    edges = zip(aug.src[2:].tolist(), aug.dst[2:].tolist(), aug.weight[2:].tolist(), strict=True)
    assert sorted(edges) == [(0, 3, 0.5), (1, 3, 0.5)]


# ------------------------------------------------------------------ mode table and per-call options
def test_the_mode_registry_holds_every_mode_once_with_what_it_needs():
    from hippo_engine.modes import ModeSpec, check_mode, register_mode
    assert mode_names()[:2] == ("hipporag2", "naive") and len(set(mode_names())) == len(mode_names()) == 12
    with pytest.raises(ValueError, match="hi_bridge"):
        check_mode("global")
    with pytest.raises(ValueError, match="registered already"):
        register_mode(ModeSpec("hi", lambda: None, "again"))
    assert HI_MODES == ("hi_local", "hi_global", "hi_bridge", "hi")
    assert [m for m in mode_names() if mode_spec(m).needs_communities] == [
        "hi_global", "hi_bridge", "hi", "graphrag_local", "graphrag_global", "kb_global"]
    assert [m for m in mode_names() if mode_spec(m).reads_context] == [*HI_MODES, "graphrag_local", "graphrag_global"]
    assert [m for m in mode_names() if mode_spec(m).snapshot] == ["hipporag2", "naive"]


def test_facade_routes_modes_through_its_table(built):
    rag, _ = built
    rag._llm = NoCallLLM()
    naive = rag.retrieve(QUERIES, mode="naive")
    assert [s.docs for s in naive] == [s.docs for s in rag.retrieve_dpr(QUERIES)]
    hi = rag.retrieve(QUERIES[:1], mode="hi_local")[0]
    ctx = rag.retrieve_context(QUERIES[:1], mode="hi_local")[0]
    assert hi.docs == ctx.passages and hi.seed_entities == ctx.entities
    assert list(hi.doc_scores) == sorted(hi.doc_scores, reverse=True)


def test_retrieve_context_hipporag2_wraps_the_ranked_passages(built):
    rag, _ = built
    rag._llm = NoCallLLM()
    sols = rag.retrieve(QUERIES)
    ctxs = rag.retrieve_context(QUERIES)                        # default mode: hipporag2
    k = rag.config.qa_top_k
    for s, c in zip(sols, ctxs, strict=True):
        assert c.mode == "hipporag2" and c.passages == s.docs and tuple(c.sections) == ("passages",)
        assert c.sections["passages"] == "\n\n".join(f"Wikipedia Title: {p}" for p in s.docs[:k])
        assert c.passage_context == k
    # already-ranked solutions are wrapped as they are (no retrieval)
    again = rag.retrieve_context(sols)
    assert [c.to_dict() for c in again] == [c.to_dict() for c in ctxs]
    with pytest.raises(TypeError):
        rag.retrieve(QUERIES, only_need_context=True)           # the old keyword is gone


def test_query_param_per_call(tmp_path):
    seen = []

    def respond(messages):
        user = messages[-1]["content"]
        if "Question:" in user and "Thought:" in user:
            seen.append(user.count("Wikipedia Title: "))
            return "Thought: x.\nAnswer: Brask"
        return CountingResponder()(messages)

    rag = make_rag(tmp_path, llm=ScriptedLLM(respond), use_filter=True)
    rag.index(CORPUS)
    calls = rag.llm.calls
    sols = rag.retrieve(QUERIES, param=QueryParam(top_k=3, use_filter=False))
    assert rag.llm.calls == calls                                # no filter call
    assert all(len(s.docs) == 3 for s in sols)
    assert [len(s.docs) for s in rag.retrieve(QUERIES[:1], 2, param=QueryParam(top_k=3, use_filter=False))] == [2]
    assert [s.docs for s in rag.retrieve(QUERIES, param=QueryParam(mode="naive", top_k=3))] == \
        [s.docs for s in rag.retrieve_dpr(QUERIES, 3)]
    seen.clear()
    rag.qa(sols, param=QueryParam(qa_top_k=2))
    assert seen[-len(sols):] == [2] * len(sols) and sols[0].answer == "Brask"
    out = rag.rag_qa(QUERIES[:1], param=QueryParam(use_filter=False, qa_top_k=1))
    assert len(out) == 3 and seen[-1] == 1
