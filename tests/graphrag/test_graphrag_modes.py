"""graphrag_local and graphrag_global (hippo_engine.graphrag) on the toy index with fakes: context
sections under their budgets, QueryParam budgets and level, map calls counted, only_need_context
without an LLM call, where= on the passages."""
from __future__ import annotations

import pytest
from fakes import NoCallLLM, ScriptedLLM
from helpers import CORPUS
from peer_fakes import QUERIES, PeerResponder, built_rag

from hippo_engine.config import QueryParam
from hippo_engine.graphrag.global_context import BATCH_BREAK, batches, group_batches
from hippo_engine.hirag.report_context import whitespace_tokens
from hippo_engine.modes import mode_spec

BUDGETS = dict(graphrag_text_unit_tokens=40, graphrag_local_context_tokens=30, graphrag_report_tokens=25)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return built_rag(tmp_path_factory.mktemp("graphrag"), **BUDGETS)


def test_local_context_has_its_sections_under_the_budgets_and_no_llm_call(built):
    rag, _ = built
    rag._llm = NoCallLLM()
    for ctx in rag.retrieve_context(QUERIES, mode="graphrag_local"):
        assert tuple(ctx.sections) == mode_spec("graphrag_local").sections
        assert ctx.tokens["passages"] <= 40 and ctx.tokens["reports"] <= 25
        assert ctx.tokens["entities"] + ctx.tokens["relations"] <= 30
        assert ctx.entities and ctx.passages and ctx.communities
        assert ctx.sections["reports"].startswith("# About")
        assert ctx.sections["passages"].startswith("Wikipedia Title: ")
    top = rag.retrieve_context(["Who founded Tamsin College?"], mode="graphrag_local")[0]
    assert "tamsin college" in top.sections["entities"]
    assert CORPUS[3] in top.passages[:3]


def test_query_param_budgets_and_level_override_the_section(built):
    rag, _ = built
    rag._llm = NoCallLLM()
    wide = QueryParam(mode="graphrag_local", text_unit_tokens=400, local_context_tokens=400,
                      community_report_tokens=400)
    small = QueryParam(mode="graphrag_local", text_unit_tokens=12, local_context_tokens=8, community_report_tokens=6)
    big, tiny = rag.retrieve_context(QUERIES[:1], param=wide)[0], rag.retrieve_context(QUERIES[:1], param=small)[0]
    assert big.tokens["passages"] > 40 and big.tokens["reports"] > 25 and " | " in big.sections["relations"]
    assert tiny.tokens["passages"] <= 12 and tiny.tokens["reports"] <= 6
    assert tiny.tokens["entities"] + tiny.tokens["relations"] <= 8
    levels = {c.id: c.level for c in rag.hirag.communities().communities}
    assert max(levels.values()) >= 1
    low = rag.retrieve_context(QUERIES[:1], param=QueryParam(mode="graphrag_local", level=0,
                                                             community_report_tokens=400))[0]
    assert low.communities and all(levels[c] == 0 for c in low.communities)
    glob = rag.retrieve_context(QUERIES[:1], param=QueryParam(mode="graphrag_global", level=0))[0]
    assert glob.communities and all(levels[c] == 0 for c in glob.communities)


def test_global_context_batches_the_ranked_reports_without_an_llm_call(built):
    rag, _ = built
    rag._llm = NoCallLLM()
    cfg = rag.config.graphrag
    for ctx in rag.retrieve_context(QUERIES, mode="graphrag_global"):
        assert tuple(ctx.sections) == ("reports",)
        groups = batches(ctx)
        assert 1 <= len(groups) <= cfg.graphrag_global_max_batches
        count = rag.hirag.token_counter()
        assert all(sum(count(t) for t in g) <= 25 for g in groups)
        assert sum(len(g) for g in groups) == len(ctx.communities)
        assert ctx.passages and len(ctx.passages) == len(set(ctx.passages))
    # the communities come in order of their report vectors' similarity to the question
    q = "About Tamsin College"
    ctx = rag.retrieve_context([q], mode="graphrag_global")[0]
    cset = rag.hirag.communities()
    sims = dict(zip((c.id for c in cset.communities), cset.matrix() @ rag.encoder.encode([q])[0], strict=True))
    shown = [sims[c] for c in ctx.communities]
    assert shown == sorted(shown, reverse=True) and shown[0] == max(sims[c] for c in cset.reports)


def test_group_batches_respects_budget_cap_and_cuts_long_reports():
    texts = ["a b c d", "e f", "g h i", "j k l m n o p q r s t u v", "w"]
    groups = group_batches(texts, whitespace_tokens, 5, 10)
    assert groups == [["a b c d"], ["e f", "g h i"], ["j k l m n"], ["w"]]
    assert group_batches(texts, whitespace_tokens, 5, 2) == [["a b c d"], ["e f", "g h i"]]
    assert all(BATCH_BREAK not in t for g in groups for t in g)


def test_rag_qa_global_counts_map_calls_and_tokens(tmp_path):
    rag, resp = built_rag(tmp_path, graphrag_report_tokens=25)
    resp.calls = dict.fromkeys(resp.calls, 0)
    param = QueryParam(mode="graphrag_global", response_type="one name")
    contexts = rag.retrieve_context(QUERIES, param=param)
    sols, responses, meta = rag.rag_qa(QUERIES, param=param)
    n_batches = [len(batches(c)) for c in contexts]
    assert resp.calls["map"] == sum(n_batches) and resp.calls["reduce"] == sum(m["points_used"] > 0 for m in meta)
    for m, nb in zip(meta, n_batches, strict=True):
        assert m["map_calls"] == nb
        assert m["llm_calls"] == nb + (m["points_used"] > 0)
        assert m["prompt_tokens"] == 10 * m["llm_calls"] and m["completion_tokens"] == 5 * m["llm_calls"]
    assert all("Write one name." in msgs[0]["content"] for msgs in resp.reduce_prompts)
    assert sols[0].answer and responses[0].endswith(sols[0].answer)
    assert sols[0].doc_ids and sols[0].docs                    # the communities' passages, with document ids


def test_global_without_points_skips_the_reduce_and_bad_replies_are_survived(tmp_path):
    replies = iter(["no json here", "- Tamsin College was founded by Oren Pike (score: 90)", "__import__('os')",
                    '{"points": [{"description": "x", "score": "high"}, {"score": 3}, 7]}'] * 50)
    resp = PeerResponder(map_reply=lambda _user: next(replies))
    rag, _ = built_rag(tmp_path, responder=resp, graphrag_report_tokens=25, graphrag_global_max_batches=4)
    resp.calls = dict.fromkeys(resp.calls, 0)
    sols, _, meta = rag.rag_qa(QUERIES[:1], param=QueryParam(mode="graphrag_global"))
    assert meta[0]["points"] == (1 if meta[0]["map_calls"] >= 2 else 0)
    assert resp.calls["reduce"] == int(meta[0]["points"] > 0)
    assert meta[0]["llm_calls"] == meta[0]["map_calls"] + resp.calls["reduce"]
    none = PeerResponder(map_reply=lambda _user: '{"points": []}')
    rag2, _ = built_rag(tmp_path / "none", responder=none)
    none.calls = dict.fromkeys(none.calls, 0)
    sols, responses, meta = rag2.rag_qa(QUERIES[:1], param=QueryParam(mode="graphrag_global"))
    assert none.calls["reduce"] == 0 and sols[0].answer == "" and meta[0]["points"] == 0


@pytest.mark.parametrize("mode", ["graphrag_local", "graphrag_global", "kb_hybrid", "naive"])
def test_only_need_context_returns_the_context_without_an_llm_call(built, mode):
    rag, _ = built
    rag._llm = NoCallLLM()
    param = QueryParam(mode=mode, only_need_context=True)
    sols, responses, meta = rag.rag_qa(QUERIES, param=param)
    want = [c.text for c in rag.retrieve_context(QUERIES, param=QueryParam(mode=mode))]
    assert responses == want and all(m["llm_calls"] == 0 for m in meta)
    assert all(s.answer == "" for s in sols)


def test_local_rag_qa_reads_the_context_once(built):
    rag, _ = built
    seen = []
    rag._llm = ScriptedLLM(lambda m: seen.append(m[-1]["content"]) or "Answer: Oren Pike")
    sols, _, meta = rag.rag_qa(QUERIES[:1], param=QueryParam(mode="graphrag_local"))
    assert sols[0].answer == "Oren Pike" and meta[0]["llm_calls"] == 1 and len(seen) == 1
    assert "-----Backgrounds-----" in seen[0] and "-----Relations-----" in seen[0]


def test_where_restricts_the_passages_of_the_graphrag_modes(tmp_path):
    from helpers import make_rag
    resp = PeerResponder()
    rag = make_rag(tmp_path, llm=ScriptedLLM(resp), max_cluster_size=3, use_filter=False)
    rag.index(CORPUS, ids=[f"d{i}" for i in range(len(CORPUS))],
              metadata=[{"user": "alice" if i % 2 == 0 else "bob"} for i in range(len(CORPUS))])
    rag.build_communities()
    alice = {CORPUS[i] for i in range(0, len(CORPUS), 2)}
    for mode in ("graphrag_local", "graphrag_global"):
        sols = rag.retrieve(QUERIES, mode=mode, where={"user": "alice"})
        assert any(s.docs for s in sols)
        assert all(set(s.docs) <= alice for s in sols)
        assert all(d.startswith("d") and int(d[1:]) % 2 == 0 for s in sols for ds in s.doc_ids for d in ds)
