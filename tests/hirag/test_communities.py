"""Hierarchical Leiden communities, report writing (retry, fallback, packing), persistence and
incremental report reuse (hippo_engine.hirag: clustering, reports, store)."""
import json
import logging
import random

import numpy as np
import pytest
from fakes import NgramEncoder, ScriptedLLM
from helpers import make_rag, toy_respond

from hippo_engine.hirag.clustering import _leiden_groups, cluster_entities, entity_igraph, member_key
from hippo_engine.hirag.report_context import ReportInputs, community_context
from hippo_engine.hirag.report_store import communities_state, load_communities
from hippo_engine.hirag.reports import CommunityReport, parse_report, write_reports
from hippo_engine.ids import community_id
from hippo_engine.index.graph import KIND_CONTEXT, KIND_FACT, GraphData
from hippo_engine.llm.base import LLMError, LLMResponse
from hippo_engine.prompts import load_json_prompt

REPORT_SYSTEM = load_json_prompt("community_report.json")["system"]


# ------------------------------------------------------------------ fixtures and fakes
def planted_graph(groups=4, size=12, p_in=0.5, p_out=0.02, seed=1, passages=0) -> GraphData:
    """Entities in ``groups`` dense groups with sparse links between them (fixed seed);
    optionally ``passages`` passage nodes each linked to a few entities by context edges."""
    rng = np.random.default_rng(seed)
    n = groups * size
    src, dst = [], []
    for i in range(n):
        for j in range(i + 1, n):
            if rng.random() < (p_in if i // size == j // size else p_out):
                src.append(i)
                dst.append(j)
    kinds = [KIND_FACT] * len(src)
    weight = [2.0] * len(src)
    for p in range(passages):
        for e in sorted(rng.choice(n, 3, replace=False)):
            src.append(int(e))
            dst.append(n + p)
            kinds.append(KIND_CONTEXT)
            weight.append(1.0)
    ids = [f"entity-{i:04d}" for i in range(n)] + [f"chunk-{p:04d}" for p in range(passages)]
    return GraphData(np.array(ids, dtype=object), n, np.array(src, np.int64), np.array(dst, np.int64),
                     np.array(weight), np.array(kinds, np.uint8))


def report_json(messages) -> str:
    ctx = messages[-1]["content"]
    first = next((ln[2:] for ln in ctx.splitlines() if ln.startswith("- ")), "group")
    return json.dumps({"title": f"About {first}", "summary": f"A group around {first}.",
                       "findings": [{"summary": f"{first} is central.", "explanation": "It has most links."}],
                       "rating": 4})


class CountingResponder:
    """OpenIE via the toy responder; community reports via ``report_json``; counts report calls."""

    def __init__(self, report=report_json):
        self.report_calls = 0
        self.report = report

    def __call__(self, messages):
        if messages[0]["content"] == REPORT_SYSTEM:
            self.report_calls += 1
            return self.report(messages)
        return toy_respond(messages)


_SYL = ["ka", "lo", "mi", "ru", "ze", "to", "vi", "na", "pe", "sa", "do", "fu", "gi", "ha", "ju", "ko",
        "bel", "dar", "gon", "mer", "tas", "vor", "wyn", "zul"]


def world_corpus(worlds=6, per_world=5, seed=7) -> tuple[list[str], list[list[str]]]:
    """Passages in ``worlds`` disjoint topic worlds (names never shared between worlds), and
    each world's entity names. Sentences "A verb B." give toy triples."""
    rng = random.Random(seed)
    used, names = set(), []
    for _ in range(worlds):
        w = []
        while len(w) < 7:
            nm = "".join(rng.choice(_SYL) for _ in range(3)).capitalize()
            if nm not in used:
                used.add(nm)
                w.append(nm)
        names.append(w)
    verbs = ["trades with", "borders", "admires", "founded", "visited"]
    docs = []
    for wi, w in enumerate(names):
        for k in range(per_world):
            a, b, c = w[k % 7], w[(k + 1) % 7], w[(k + 3) % 7]
            docs.append(f"{a} record {wi}-{k}\n{a} {verbs[k % 5]} {b}. {b} {verbs[(k + 2) % 5]} {c}.")
    return docs, names


# ------------------------------------------------------------------ clustering
def test_clustering_is_deterministic_and_leaves_global_random_state_alone():
    g = planted_graph()
    random.seed(123)
    before = random.getstate()
    a = cluster_entities(g, max_cluster_size=5, seed=0)
    assert random.getstate() == before
    b = cluster_entities(g, max_cluster_size=5, seed=0)
    assert [c.to_json() for c in a] == [c.to_json() for c in b]
    assert random.getstate() == before
    # a seed is honoured: the same seed gives the same, and the ids are member-set hashes
    assert all(c.id == community_id(c.entities) for c in a)


def test_clustering_is_hierarchical_and_respects_max_cluster_size():
    g = planted_graph()
    comms = cluster_entities(g, max_cluster_size=5, seed=0, min_size=1)
    by_id = {c.id: c for c in comms}
    level0 = [c for c in comms if c.level == 0]
    # level 0 partitions the whole entity graph
    members = sorted(e for c in level0 for e in c.entities)
    assert members == sorted(g.node_ids[: g.num_entities])
    assert max(c.level for c in comms) >= 1
    ig_graph = entity_igraph(g)
    idx = {n: i for i, n in enumerate(ig_graph.vs["name"])}
    for c in comms:
        if c.parent is not None:
            p = by_id[c.parent]
            assert c.level == p.level + 1 and c.id in p.children
            assert set(c.entities) <= set(p.entities)
        if c.children:
            kids = [by_id[k] for k in c.children]
            union = [e for k in kids for e in k.entities]
            assert len(union) == len(set(union))                    # disjoint
            assert sorted(union) == sorted(c.entities)              # min_size=1: they cover the parent
            assert c.size > 5                                       # only large ones are split
        elif c.size > 5:
            # a large leaf must be one Leiden cannot split
            sub = ig_graph.induced_subgraph(sorted(idx[e] for e in c.entities))
            assert len(_leiden_groups(sub, f"0:{member_key(c.entities)}")) == 1


def test_min_size_drops_singletons_and_isolated_entities():
    g = planted_graph(groups=2, size=6, p_in=1.0, p_out=0.0)
    # add an isolated entity
    g = GraphData(np.concatenate([g.node_ids, np.array(["entity-zzzz"], dtype=object)]), g.num_entities + 1,
                  g.src, g.dst, g.weight, g.kinds)
    comms = cluster_entities(g, max_cluster_size=10, seed=0, min_size=2)
    assert all(c.size >= 2 for c in comms)
    assert "entity-zzzz" not in {e for c in comms for e in c.entities}


def test_member_edges_and_source_passages():
    g = planted_graph(groups=2, size=6, p_in=1.0, p_out=0.0, passages=8)
    comms = cluster_entities(g, max_cluster_size=10, seed=0)
    for c in comms:
        ms = set(c.entities)
        inside = {(g.node_ids[s], g.node_ids[d]) for s, d in zip(g.src, g.dst, strict=False)
                  if g.node_ids[s] in ms and g.node_ids[d] in ms}
        assert set(c.edges) == {tuple(sorted(e)) for e in inside}
        # passages: every passage mentioning a member, most members first
        idx = g.index_of
        counts = {}
        for s, d, k in zip(g.src, g.dst, g.kinds, strict=False):
            if k & KIND_CONTEXT and g.node_ids[s] in ms:
                counts[g.node_ids[d]] = counts.get(g.node_ids[d], 0) + 1
        assert set(c.passages) == set(counts)
        assert [counts[p] for p in c.passages] == sorted(counts.values(), reverse=True)
        assert all(idx[p] >= g.num_entities for p in c.passages)


# ------------------------------------------------------------------ parsing and writing
def test_parse_report_accepts_fences_and_loose_fields():
    r = parse_report('Sure!\n```json\n{"Title": "X", "summary": "Y", "findings": ["a", {"summary": "b"}], '
                     '"rating": "7.5"}\n```')
    assert r == {"title": "X", "summary": "Y", "findings": [{"summary": "a", "explanation": ""},
                                                             {"summary": "b", "explanation": ""}], "rating": 7.5}
    assert parse_report('{"title": "X", "summary": "Y", "rating": 99}')["rating"] == 10.0
    assert parse_report('{"title": "X", "summary": "Y", "rating": "high"}')["rating"] == 0.0
    # a looping reply cut off by the token limit inside the summary is closed and de-duplicated
    looped = '{"title": "Wood", "summary": "He argues X. It says Y. It says Y. It says Y. It sa'
    assert parse_report(looped) == {"title": "Wood", "summary": "He argues X. It says Y.", "findings": [],
                                    "rating": 0.0}
    for bad in ("no json here", '["a", "b"]', '{"title": "", "summary": "x"}', '{"summary": "only"}',
                '{"title": "cut before the summary'):
        with pytest.raises(ValueError):
            parse_report(bad)


def _inputs(g):
    return ReportInputs(g, lambda e: e.replace("entity-", "e"), lambda p: f"Title {p}\ntext of {p}", {})


def test_malformed_report_is_retried_once_then_listed(caplog):
    g = planted_graph(groups=2, size=6, p_in=1.0, p_out=0.0)
    comms = cluster_entities(g, max_cluster_size=10, seed=0)
    assert len(comms) == 2
    replies = {}

    def respond(messages):
        key = messages[-1]["content"][:200]
        replies[key] = replies.get(key, 0) + 1
        if messages[-1]["content"].startswith("Your reply could not be read"):
            # the correction turn: the first community gets it right, the second never does
            return report_json(messages[:-2]) if "e0000" in messages[-3]["content"] else "still not json"
        return "I think this group is nice."

    llm = ScriptedLLM(respond)
    with caplog.at_level(logging.WARNING):
        reports, stats = write_reports(comms, _inputs(g), llm, {})
    assert llm.calls == 4 and stats.llm_calls == 4 and stats.retries == 2
    sources = sorted(r.source for r in reports.values())
    assert sources == ["fallback", "llm"]
    fb = next(r for r in reports.values() if r.source == "fallback")
    assert "Community of 6 entities" in fb.summary and fb.attempts == 2
    assert "member listing" in caplog.text


def test_failed_calls_are_retried_and_never_crash():
    g = planted_graph(groups=2, size=6, p_in=1.0, p_out=0.0)
    comms = cluster_entities(g, max_cluster_size=10, seed=0)

    class Flaky(ScriptedLLM):
        def generate(self, messages, **kw):
            with self._lock:
                self.calls += 1
                n = self.calls
            if n <= 3:
                raise LLMError("server down")
            return LLMResponse(text=report_json(messages), prompt_tokens=7, completion_tokens=3)

    llm = Flaky(lambda m: "")
    reports, stats = write_reports(comms, _inputs(g), llm, {})
    assert llm.calls == 4
    assert sorted(r.source for r in reports.values()) == ["fallback", "llm"]


def test_max_llm_reports_lists_the_rest_and_existing_are_reused():
    g = planted_graph(groups=3, size=5, p_in=1.0, p_out=0.0)
    comms = cluster_entities(g, max_cluster_size=10, seed=0)
    assert len(comms) == 3
    llm = ScriptedLLM(report_json)
    reports, stats = write_reports(comms, _inputs(g), llm, {}, max_llm_reports=1)
    assert llm.calls == 1 and stats.written == 1 and stats.listings == 2
    existing = {c.key: reports[c.id] for c in comms}
    llm2 = ScriptedLLM(report_json)
    again, stats2 = write_reports(comms, _inputs(g), llm2, existing)
    assert llm2.calls == 0 and stats2.reused == 3
    assert {k: v.text() for k, v in again.items()} == {k: v.text() for k, v in reports.items()}


def test_children_reports_are_packed_when_the_context_overflows():
    g = planted_graph(groups=4, size=12, p_in=0.6, p_out=0.05)
    comms = cluster_entities(g, max_cluster_size=5, seed=0)
    by_id = {c.id: c for c in comms}
    parent = next(c for c in comms if c.children)
    child_reports = {k: CommunityReport(title=f"Child {k[-4:]}", summary="child summary", rating=3.0)
                     for k in parent.children}
    ctx_small, used = community_context(parent, _inputs(g), child_reports, by_id, budget=60)
    assert used and "Sub-community reports:" in ctx_small and "Child " in ctx_small
    ctx_big, used_big = community_context(parent, _inputs(g), child_reports, by_id, budget=100000)
    assert not used_big and "Sub-community reports:" not in ctx_big
    assert len(ctx_small.split()) <= 60


# ------------------------------------------------------------------ persistence and incremental reuse
def test_build_persists_and_reuses(tmp_path):
    docs, _ = world_corpus()
    resp = CountingResponder()
    rag = make_rag(tmp_path, llm=ScriptedLLM(resp), max_cluster_size=4)
    rag.index(docs)
    assert communities_state(rag.index_state, rag.config) == "missing"
    s1 = rag.build_communities()
    n = s1["communities"]
    assert n > 0 and resp.report_calls == n == s1["reports"]["llm_calls"]
    assert communities_state(rag.index_state, rag.config) == "current"
    # stored: the tables and the fourth store
    cset = load_communities(rag.index_state)
    assert len(cset.communities) == n and set(cset.reports) == {c.id for c in cset.communities}
    assert cset.matrix().shape == (n, NgramEncoder().dim)
    # a reopened index sees the same, and a second build costs nothing
    rag2 = make_rag(tmp_path, llm=ScriptedLLM(resp), max_cluster_size=4)
    before = resp.report_calls
    s2 = rag2.build_communities()
    assert resp.report_calls == before and s2["reports"]["reused"] == n
    assert [c.to_json() for c in rag2.communities.communities] == [c.to_json() for c in cset.communities]


def test_insert_10_percent_rewrites_only_changed_communities(tmp_path):
    docs, names = world_corpus(worlds=6, per_world=5)
    resp = CountingResponder()
    rag = make_rag(tmp_path, llm=ScriptedLLM(resp), max_cluster_size=4)
    rag.index(docs)
    rag.build_communities()
    old = {c.key: c for c in rag.communities.communities}
    old_reports = {c.key: rag.communities.reports[c.id].text() for c in rag.communities.communities}
    # 10% more documents, all about the first world (plus one new entity)
    w = names[0]
    extra = [f"{w[0]} news {i}\n{w[i]} trades with Novaport. Novaport borders {w[i + 2]}." for i in range(3)]
    assert len(extra) == len(docs) // 10
    rag.index(extra)
    assert communities_state(rag.index_state, rag.config) == "stale"
    before = resp.report_calls
    s = rag.build_communities()
    calls = resp.report_calls - before
    new = {c.key: c for c in rag.communities.communities}
    changed = [k for k in new if k not in old]
    assert calls == len(changed) == s["reports"]["llm_calls"]
    assert 0 < calls < len(new)
    assert s["reports"]["reused"] == len(new) - len(changed)
    for c in rag.communities.communities:      # reused reports are the stored ones, untouched
        if c.key in old:
            assert rag.communities.reports[c.id].text() == old_reports[c.key]
    # untouched worlds keep their communities exactly
    other = {n.lower() for wn in names[1:] for n in wn}
    eid_name = rag.index_state.stores["entity"].text
    for c in old.values():
        if {eid_name(e) for e in c.entities} <= other:
            assert c.key in new
    # deleting them again: only the communities that changed need reports again
    rag.delete(extra)
    before = resp.report_calls
    s = rag.build_communities()
    assert resp.report_calls - before == len([k for k in old if k not in new]) == s["reports"]["llm_calls"]
    assert {c.key for c in rag.communities.communities} == set(old)
