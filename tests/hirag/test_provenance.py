"""Provenance of the hi_* contexts (hippo_engine.hirag.provenance): every item says which section it is
in and why it was chosen, the reasons agree with the index (checked from the stored vectors, the graph
arrays and the communities, not from the engine's own bookkeeping), explaining changes no context and
no ranking, and an item round-trips through JSON (hypothesis). Fake LLM and encoder; the real-model
test is marked slow."""
import json
import re

import numpy as np
import pytest
from fakes import NoCallLLM, ScriptedLLM
from helpers import CORPUS, make_rag
from hypothesis import given, settings
from hypothesis import strategies as st
from test_communities import CountingResponder, world_corpus

from hippo_engine.config import QueryParam
from hippo_engine.datatypes import CONTEXT_ITEM_KINDS, ContextItem, HiContext, QuerySolution
from hippo_engine.hirag.clustering import entity_igraph
from hippo_engine.hirag.context import path_segments
from hippo_engine.index.graph import KIND_CONTEXT
from hippo_engine.modes import mode_names, mode_spec

HI_MODES = tuple(m for m in mode_names() if m == "hi" or m.startswith("hi_"))

QUERIES = ["Who founded Tamsin College?", "Where was Ilse Marrow born?", "What is the capital of Kaldavia?",
           "Which fair did the wife of Oren Pike found?"]


@pytest.fixture(scope="module")
def rag(tmp_path_factory):
    """The toy corpus with communities (two levels), 5 top entities, 2 key entities per community."""
    r = make_rag(tmp_path_factory.mktemp("prov"), llm=ScriptedLLM(CountingResponder()), max_cluster_size=3,
                 use_filter=False, hi_top_k=5, hi_top_m=2)
    r.index(CORPUS)
    r.build_communities()
    r._llm = NoCallLLM()     # contexts call no LLM
    return r


def _without_provenance(d: dict) -> dict:
    return {k: v for k, v in d.items() if k != "provenance"}


def _items(ctx: HiContext, section: str, kind: str | None = None) -> list[ContextItem]:
    return [i for i in ctx.provenance if i.section == section and (kind is None or i.kind == kind)]


def _entity_names(rag) -> dict[str, str]:
    st_ = rag.index_state.stores["entity"]
    return {str(e): st_.text(str(e)) for e in st_.ids}


def _degrees(rag) -> np.ndarray:
    g = rag.index_state.graph
    m = (g.src < g.num_entities) & (g.dst < g.num_entities)
    return np.bincount(np.concatenate([g.src[m], g.dst[m]]), minlength=g.num_entities)


# ------------------------------------------------------------------ explaining changes nothing
@pytest.mark.parametrize("mode", HI_MODES)
def test_explain_changes_no_context_and_no_ranking(rag, mode):
    eng = rag.hirag.engine(need_communities=mode != "hi_local")
    q_fact, q_pass = rag.encode_queries(QUERIES)
    for j, q in enumerate(QUERIES):
        plain = eng.context(q, mode, q_fact[j], q_pass[j], 8)
        explained = eng.context(q, mode, q_fact[j], q_pass[j], 8, explain=True)
        assert not plain.provenance and explained.provenance
        assert json.dumps(plain.to_dict()) == json.dumps(_without_provenance(explained.to_dict()))
        assert plain.text == explained.text
    before = rag.retrieve(QUERIES, 6, mode=mode)
    after = rag.retrieve(QUERIES, 6, mode=mode, explain=True)
    for a, b in zip(before, after, strict=True):
        assert not a.provenance and b.provenance
        assert json.dumps(a.to_dict()) == json.dumps(_without_provenance(b.to_dict()))
        assert np.asarray(a.doc_scores).tobytes() == np.asarray(b.doc_scores).tobytes()
    # retrieve_context always explains, and its items are the explained solution's
    ctxs = rag.retrieve_context(QUERIES, mode=mode, num_to_retrieve=6)
    assert [[i.to_dict() for i in c.provenance] for c in ctxs] == [[i.to_dict() for i in s.provenance] for s in after]
    assert [c.passages for c in ctxs] == [s.docs for s in before]
    again = rag.retrieve(QUERIES, 6, mode=mode, param=QueryParam(explain=True))
    assert [s.to_dict() for s in again] == [s.to_dict() for s in after]


@pytest.mark.parametrize("mode", HI_MODES)
def test_every_item_is_in_a_section_of_its_mode_and_lines_match(rag, mode):
    for ctx in rag.retrieve_context(QUERIES, mode=mode):
        assert {i.section for i in ctx.provenance} <= set(mode_spec(mode).sections)
        assert all(i.kind in CONTEXT_ITEM_KINDS and i.reason and i.id for i in ctx.provenance)
        # items come section by section, in the context's order
        order = [s for s in ctx.sections]
        positions = [order.index(i.section) for i in ctx.provenance]
        assert positions == sorted(positions)
        # the shown entity and relation items are exactly the section's lines
        for section, kind in (("entities", "entity"), ("relations", "relation"), ("bridge", "relation")):
            if section in ctx.sections:
                lines = ctx.sections[section].split("\n") if ctx.sections[section] else []
                assert [i.text for i in _items(ctx, section, kind)] == lines, (mode, section)
        json.dumps(ctx.to_dict(), allow_nan=False)


# ------------------------------------------------------------------ entities, relations (hi_local)
def test_entity_items_carry_their_vector_search_rank_and_similarity(rag):
    names = _entity_names(rag)
    store = rag.index_state.stores["entity"]
    row = {str(e): i for i, e in enumerate(store.ids)}
    degree = _degrees(rag)
    idx = rag.index_state.graph.index_of
    for q, q_vec in zip(QUERIES, rag.encode_queries(QUERIES)[0], strict=True):
        ctx = rag.retrieve_context([q], mode="hi_local")[0]
        ents = _items(ctx, "entities", "entity")
        assert len(ents) == len(ctx.entities) == 5
        sims = store.matrix @ q_vec
        for k, it in enumerate(ents, 1):
            sim = float(sims[row[it.id]])
            assert it.rank == k and it.score == pytest.approx(sim, abs=1e-6)
            assert it.text == f"{names[it.id]} (degree {degree[idx[it.id]]})"
            assert it.reason == f"matched the query by vector search (similarity {sim:.2f}, rank {k})"
            # the rank is the entity's place among all entities by similarity (ties in either order)
            assert np.count_nonzero(sims > sim + 1e-6) <= k - 1 < np.count_nonzero(sims >= sim - 1e-6)
        assert [round(i.score, 6) for i in ents] == [s for _, s in ctx.entities]


def test_relation_items_name_their_top_entity_and_the_order(rag):
    names = _entity_names(rag)
    degree = _degrees(rag)
    idx = rag.index_state.graph.index_of
    for q in QUERIES:
        ctx = rag.retrieve_context([q], mode="hi_local")[0]
        top = {n for n, _ in ctx.entities}
        rels = _items(ctx, "relations", "relation")
        assert rels
        keys = []
        for it in rels:
            a, b = it.id.split("|")
            assert set(it.via) == {names[a], names[b]} & top and it.via
            d = int(degree[idx[a]] + degree[idx[b]])
            assert it.score == d and it.numbers["degree_sum"] == d
            assert it.reason.startswith("a relation of top entit") and f"degree sum ({d})" in it.reason
            assert all(n in it.reason for n in it.via)
            keys.append((-d, -it.numbers["weight"]))
        assert keys == sorted(keys)


# ------------------------------------------------------------------ communities (hi_global, hi)
@pytest.mark.parametrize("mode", ["hi_global", "hi"])
def test_community_items_hold_the_top_entities_they_name(rag, mode):
    cset = rag.communities
    by_id = {c.id: c for c in cset.communities}
    names = _entity_names(rag)
    for q in QUERIES:
        ctx = rag.retrieve_context([q], mode=mode)[0]
        comms = _items(ctx, "reports", "community")
        assert [i.id for i in comms] == ctx.communities and comms
        top = {n for n, _ in ctx.entities}
        for it in comms:
            c = by_id[it.id]
            held = {names[e] for e in c.entities} & top
            assert set(it.via) == held and it.score == len(held) > 0
            assert it.text == cset.reports[c.id].title and it.numbers["level"] == c.level
            assert it.reason.startswith(f"holds {len(held)} of the query's top 5 entities")
            assert it.shown
        assert [-i.score for i in comms] == sorted(-i.score for i in comms)


# ------------------------------------------------------------------ the reasoning path (hi_bridge, hi)
def _check_path(rag, ctx: HiContext) -> None:
    """Path items against the path, its key entities and the entity graph's components."""
    g = entity_igraph(rag.index_state.graph)
    comp = g.connected_components().membership
    idx = rag.index_state.graph.index_of
    items = _items(ctx, "bridge", "path_entity")
    assert [i.text for i in items] == ctx.path and [i.rank for i in items] == list(range(1, len(ctx.path) + 1))
    keys = [k for n, k in enumerate(ctx.key_entities) if n == 0 or k != ctx.key_entities[n - 1]]
    assert items[0].text == keys[0] and items[0].reason.startswith("key entity")
    for k, it in enumerate(items[1:], 1):
        prev = items[k - 1]
        if it.reason.startswith("on the shortest path"):
            a, b = it.via[:2]
            assert it.reason.startswith(f"on the shortest path between key entities {a} and {b}")
            assert (a, b) in list(zip(keys, keys[1:], strict=False))
            assert g.are_adjacent(idx[prev.id], idx[it.id])
            continue
        assert it.reason.startswith("key entity") and it.text in ctx.key_entities
        if "the path jumps to it" in it.reason:
            assert comp[idx[prev.id]] != comp[idx[it.id]] and it.numbers["step"] == 1
        else:
            steps, frm = int(it.numbers["step"]), it.via[0]
            assert f"reached from key entity {frm} in {steps} step(s)" in it.reason
            assert items[k - steps].text == frm and g.are_adjacent(idx[prev.id], idx[it.id])
    for it in _items(ctx, "bridge", "relation"):
        step = re.match(r"step (\d+) of the reasoning path: (.+) -> (.+)$", it.reason)
        if step:
            j = int(step.group(1))
            assert (ctx.path[j - 1], ctx.path[j]) == (step.group(2), step.group(3))
        else:
            assert it.reason.startswith("a relation among the reasoning path's entities")
            assert set(it.via) <= set(ctx.path)


@pytest.mark.parametrize("mode", ["hi_bridge", "hi"])
def test_path_items_follow_the_path_between_key_entities(rag, mode):
    for q in QUERIES:
        ctx = rag.retrieve_context([q], mode=mode)[0]
        _check_path(rag, ctx)
        comms = [i for i in ctx.provenance if i.kind == "community"]
        assert [i.id for i in comms] == ctx.communities
        if mode == "hi_bridge":     # the communities only chose the key entities: not shown
            assert all(i.section == "bridge" and not i.shown for i in comms)
        assert any("gave the reasoning path its key entities" in i.reason for i in comms)


def test_a_jump_between_components_is_said(tmp_path):
    docs, names = world_corpus()
    r = make_rag(tmp_path, llm=ScriptedLLM(CountingResponder()), max_cluster_size=4, use_filter=False,
                 hi_top_k=4, hi_top_m=2, synonymy_threshold=0.99)    # no synonymy edge joins the worlds
    r.index(docs)
    r.build_communities()
    r._llm = NoCallLLM()
    ctx = r.retrieve_context([f"{names[0][0]} and {names[1][0]}"], mode="hi_bridge")[0]
    _check_path(r, ctx)
    assert any("the path jumps to it" in i.reason for i in ctx.provenance)


def test_path_segments_mark_jumps():
    import igraph as ig
    g = ig.Graph(n=6, edges=[(0, 1), (1, 2), (3, 4)])
    segs = path_segments(g, [0, 2, 2, 4, 3, 5])
    assert [(s.start, s.end, s.nodes, s.jump) for s in segs] == [
        (0, 2, [1, 2], False), (2, 4, [4], True), (4, 3, [3], False), (3, 5, [5], True)]
    assert path_segments(g, []) == []


# ------------------------------------------------------------------ passages
def _mentions(rag) -> set[tuple[str, str]]:
    """(entity name, passage id) of every context edge of the stored graph."""
    g = rag.index_state.graph
    names = _entity_names(rag)
    ctx = (g.kinds & KIND_CONTEXT) > 0
    out = set()
    for x, y in zip(g.src[ctx].tolist(), g.dst[ctx].tolist(), strict=True):
        e, p = (x, y) if x < g.num_entities else (y, x)
        out.add((names[str(g.node_ids[e])], str(g.node_ids[p])))
    return out


@pytest.mark.parametrize("mode", HI_MODES)
def test_passage_items_say_which_entity_or_relation_brought_them(rag, mode):
    mentions = _mentions(rag)
    path_passages = 0
    for q in QUERIES:
        sol = rag.retrieve([q], 8, mode=mode, explain=True)[0]
        ctx = rag.retrieve_context([q], mode=mode, num_to_retrieve=8)[0]
        items = [i for i in sol.provenance if i.kind == "passage"]
        assert [i.id for i in items] == sol.passage_ids and [i.rank for i in items] == list(range(1, len(items) + 1))
        assert [i.text for i in items] == [d.split("\n", 1)[0] for d in sol.docs]
        assert sum(i.shown for i in items) == ctx.passage_context
        assert all(i.shown for i in items[:ctx.passage_context])
        top_names = [n for n, _ in ctx.entities]
        last_unit_rank = 0
        for it in items:
            unit = re.match(r"a text unit of top entity (.+?) \(entity rank (\d+),", it.reason)
            if unit:
                name, r = unit.group(1), int(unit.group(2))
                assert (name, it.id) in mentions and top_names[r - 1] == name
                # text units come entity by entity, and no better top entity is in the passage
                assert r >= last_unit_rank and not any((n, it.id) in mentions for n in top_names[:r - 1])
                last_unit_rank = r
                assert it.via == [n for n in top_names if (n, it.id) in mentions]
                assert it.reason.endswith(f"mentions top entities {', '.join(it.via)}")
            else:
                assert mode in ("hi_bridge", "hi")
                a, b = re.match(r"states the reasoning path's relation (.+) - (.+) \(bridge line", it.reason).groups()
                assert (a, it.id) in mentions and (b, it.id) in mentions and {a, b} <= set(ctx.path)
                last_unit_rank = 10 ** 9       # path passages come after every text unit
                path_passages += 1
    assert path_passages > 0 if mode in ("hi_bridge", "hi") else path_passages == 0


def test_passages_past_the_budget_are_ranked_but_not_shown(tmp_path):
    r = make_rag(tmp_path, use_filter=False, hi_text_unit_tokens=30)
    r.index(CORPUS)
    r._llm = NoCallLLM()
    ctx = r.retrieve_context([QUERIES[0]], mode="hi_local")[0]
    items = _items(ctx, "passages", "passage")
    assert 0 < ctx.passage_context < len(items)
    assert [i.shown for i in items] == [k < ctx.passage_context for k in range(len(items))]


# ------------------------------------------------------------------ JSON
finite = st.floats(allow_nan=False, allow_infinity=False, width=64)
text = st.text(max_size=20)
items = st.builds(ContextItem, section=st.sampled_from(["reports", "bridge", "entities", "relations", "passages"]),
                  kind=st.sampled_from(CONTEXT_ITEM_KINDS), id=text, text=text, reason=text,
                  rank=st.integers(1, 10 ** 6), score=st.none() | finite, via=st.lists(text, max_size=4),
                  numbers=st.dictionaries(text, finite, max_size=4), shown=st.booleans())


@settings(max_examples=200, deadline=None)
@given(st.lists(items, max_size=5))
def test_context_item_json_round_trip(its):
    for it in its:
        data = json.loads(json.dumps(it.to_dict(), allow_nan=False))
        assert ContextItem.from_dict(data) == it and ContextItem.from_dict(data).to_dict() == it.to_dict()
    ctx = HiContext(query="q", mode="hi_local", provenance=list(its))
    sol = QuerySolution("q", [], [], provenance=list(its))
    for d in (ctx.to_dict(), sol.to_dict()):
        back = json.loads(json.dumps(d, allow_nan=False))
        assert [ContextItem.from_dict(x) for x in back.get("provenance", [])] == its


# ------------------------------------------------------------------ real encoder, spaCy NER, no LLM
@pytest.mark.slow
def test_provenance_on_the_sample_corpus_with_real_models(tmp_path):
    import importlib.resources as resources

    from hippo_engine import HippoRAG
    data = json.loads(resources.files("hippo_engine").joinpath("data/sample_corpus.json").read_text("utf-8"))
    docs = [f"{d['title']}\n{d['text']}" for d in data["corpus"]]
    r = HippoRAG(tmp_path, extractor="ner", llm=NoCallLLM(), show_progress=False)
    r.index(docs)
    summary = r.build_communities(max_llm_reports=0)          # member listings, no LLM
    assert summary["communities"] > 0
    questions = [q["question"] for q in data["questions"]]
    for mode in HI_MODES:
        plain = r.retrieve(questions, 5, mode=mode)
        explained = r.retrieve(questions, 5, mode=mode, explain=True)
        assert [json.dumps(s.to_dict()) for s in plain] == \
            [json.dumps(_without_provenance(s.to_dict())) for s in explained]
        for ctx, sol in zip(r.retrieve_context(questions, mode=mode, num_to_retrieve=5), explained, strict=True):
            assert [i.to_dict() for i in ctx.provenance] == [i.to_dict() for i in sol.provenance]
            assert [i.id for i in ctx.provenance if i.kind == "passage"] == sol.passage_ids
            if mode != "hi_local":
                assert all("member listing" in i.reason for i in ctx.provenance if i.kind == "community")
            if "bridge" in ctx.sections:
                _check_path(r, ctx)
    # the Glass Orchard question: its novel's passage comes first, as the text unit of the novel's entity
    ctx = r.retrieve_context([questions[1]], mode="hi_local")[0]
    first = _items(ctx, "passages", "passage")[0]
    assert first.text == "The Glass Orchard" and first.via[0] == "the glass orchard"
    assert _items(ctx, "entities")[0].text.startswith("the glass orchard")
