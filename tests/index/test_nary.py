"""extractor="nary": the n-ary facts reply parser, the results file, the extractor and the facade."""
from __future__ import annotations

import json
import re

import pytest
from fakes import NgramEncoder, ScriptedLLM
from helpers import CORPUS, assert_same, snapshot, toy_entities
from openai_server import FakeOpenAIServer

from hippo_engine import HippoRAG
from hippo_engine.datatypes import Hyperedge
from hippo_engine.ids import chunk_id, entity_id, fact_id
from hippo_engine.index.extractors import make_extractor
from hippo_engine.index.nary import (
    NaryExtractor,
    NaryParse,
    load_nary_file,
    load_nary_prompt,
    nary_messages,
    parse_nary,
    save_nary_file,
)
from hippo_engine.index.openie import OpenIEError
from hippo_engine.llm.base import LLMError, LLMResponse

try:  # property tests need hypothesis (pip install hypothesis); the rest runs without it
    from hypothesis import given, settings
    from hypothesis import strategies as st
except ImportError:  # pragma: no cover
    given = None


def seg(text, *names, completeness=9):
    return {"text": text, "completeness": completeness,
            "entities": [{"name": n, "type": "thing", "description": "d", "importance": 80} for n in names]}


def reply(*segments) -> str:
    return json.dumps({"segments": list(segments)})


def kept(p: NaryParse):
    return [(s.text, [e.name for e in s.entities]) for s in p.segments]


GOOD = reply(seg("Ilse Marrow was born in Velor.", "Ilse Marrow", "Velor"),
             seg("Ilse Marrow studied at Tamsin College.", "Ilse Marrow", "Tamsin College"))
GOOD_KEPT = [("Ilse Marrow was born in Velor.", ["Ilse Marrow", "Velor"]),
             ("Ilse Marrow studied at Tamsin College.", ["Ilse Marrow", "Tamsin College"])]


# ------------------------------------------------------------------ the parser
def test_parse_well_formed_reply_keeps_metadata():
    p = parse_nary(GOOD)
    assert p.ok and p.dropped == 0 and not p.truncated
    assert kept(p) == GOOD_KEPT
    s = p.segments[0]
    assert s.completeness == 9 and s.entities[0].type == "thing" and s.entities[0].importance == 80
    assert s.hyperedge() == Hyperedge("Ilse Marrow was born in Velor.", ("Ilse Marrow", "Velor"))


@pytest.mark.parametrize("text", [
    f"```json\n{GOOD}\n```",
    f"```\n{GOOD}```\nThat is all.",
    f"Sure! Here are the segments:\n{GOOD}\nLet me know if you need more.",
    f"Facts [JSON] below (see {{segments}}):\n{GOOD}",
    GOOD.replace('"', "'"),                                    # single quotes
    GOOD.replace("}]}", "},]},"),                              # trailing commas
    json.dumps({"Segments": json.loads(GOOD)["segments"]}),    # key spelling
    json.dumps(json.loads(GOOD)["segments"]),                  # a bare list
    json.dumps({"result": {"knowledge_segments": json.loads(GOOD)["segments"]}}),  # wrapped
    "\n".join(json.dumps(s) for s in json.loads(GOOD)["segments"]),               # one per line
])
def test_parse_tolerates_wrappers_and_malformations(text):
    p = parse_nary(text)
    assert p.ok, p.error
    assert kept(p) == GOOD_KEPT


def test_parse_truncated_keeps_complete_segments_only():
    cut = GOOD[: GOOD.index("Tamsin College\"", GOOD.index("entities", 80)) + 3]
    p = parse_nary(cut)
    assert p.ok and p.truncated
    assert kept(p) == GOOD_KEPT[:1]
    mid_text = GOOD[: GOOD.index("studied") + 3]
    assert kept(parse_nary(mid_text)) == GOOD_KEPT[:1]
    quoted = GOOD.replace('"', "'")
    p = parse_nary(quoted[: quoted.index("Tamsin College'", quoted.index("entities", 80)) + 3])
    assert kept(p) == GOOD_KEPT[:1] and p.truncated and p.dropped == 1      # the cut one is dropped
    first = parse_nary(GOOD[:60])
    assert not first.ok and "cut off" in first.error


def test_parse_mismatched_closing_brackets_of_a_finished_reply():
    # what Qwen2.5-Coder-0.5B wrote: the last segment closed with "]" instead of "}", the root left open
    text = GOOD[: -len("}]}]}")] + "}]]}"
    assert kept(parse_nary(text, cut_off=False)) == GOOD_KEPT           # it finished: all kept
    p = parse_nary(text, cut_off=True)                                  # cut off: the last one is suspect
    assert kept(p) == GOOD_KEPT[:1] and p.truncated and p.dropped == 1
    assert kept(parse_nary(text)) == GOOD_KEPT[:1]                      # unknown: open brackets mean a cut
    # ... or the list closed with "}": every item is complete
    p = parse_nary(GOOD[: -len("]}")] + "}}", cut_off=False)
    assert kept(p) == GOOD_KEPT and not p.truncated and p.dropped == 0


def test_parse_fields_missing_extra_or_mistyped():
    text = json.dumps({"segments": [
        {"text": "  A   b. ", "completeness": "8/10", "extra": [1, 2], "entities": [
            {"name": " Alpha ", "importance": 250, "type": 3, "description": ["x"]},
            {"entity_name": "Beta", "importance": "-5"},
            "Gamma", 1873, True, None, 2.5, ["Delta"], {"type": "no name"}, {"name": "  "}, {"name": "!!"},
            "Alpha"]},
        {"text": "No entities.", "entities": []},
        {"text": "Entities not a list.", "entities": 7},
        {"text": "", "entities": ["Empty text"]},
        {"text": 42, "entities": ["Number text"]},
        {"entities": ["No text"]},
        "a bare string", 17, None, [],
        {"fact": "Aliases work.", "named_entities": "Solo", "score": "high"},
        {"text": "A b.", "entities": ["Duplicate text"]},
    ]})
    p = parse_nary(text)
    assert p.ok
    a, b = p.segments
    assert (a.text, a.completeness) == ("A b.", 8)
    assert [(e.name, e.type, e.description, e.importance) for e in a.entities] == [
        ("Alpha", None, None, 100), ("Beta", None, None, 0), ("Gamma", None, None, None),
        ("1873", None, None, None)]
    assert (b.text, [e.name for e in b.entities], b.completeness) == ("Aliases work.", ["Solo"], None)
    # 7 unusable entities + 1 duplicate; 5 unusable segment objects + 4 non-objects + 1 duplicate text
    assert p.dropped == 8 + 10


@pytest.mark.parametrize("text, ok", [
    ("", False), ("   \n", False), ("null", False), ("I cannot help with that.", False),
    ("{}", False), ('{"answer": 42}', False), ("[1, 2, 3]", False), ('["just", "strings"]', False),
    ('{"segments": [{"text": "No entities", "entities": []}]}', False),
    ('{"segments": "none"}', False),
    ('{"segments": []}', True),           # a passage without facts is a valid answer
    ("[]", True),
])
def test_parse_nothing_usable(text, ok):
    p = parse_nary(text)
    assert p.segments == [] and p.ok is ok and (p.error is None) is ok


@pytest.mark.parametrize("text", [
    "[" * 100_000, "{" * 100_000, '{"segments": ' + "[" * 50_000, '{"a":' * 30_000 + "1" + "}" * 30_000,
    "[" * 5000 + "]" * 5000, '{"segments": [' + '{"text": "x", "entities": [' * 3000,
    "```" * 1000, '"' * 10_001, "\\" * 1001 + '"', "\x00\ud800{[", "NaN Infinity -Infinity",
    '{"segments": [{"text": "A.", "entities": ["A"], "completeness": NaN}]}',
])
def test_parse_garbage_never_raises(text):
    p = parse_nary(text)
    assert isinstance(p, NaryParse)
    assert all(s.text and s.entities for s in p.segments)


def test_parse_non_string_input():
    assert not parse_nary(None).ok and not parse_nary(b"{}").ok and not parse_nary(["x"]).ok


def check_invariants(p):
    assert isinstance(p, NaryParse)
    assert p.ok == (p.error is None) and p.dropped >= 0
    texts = [s.text for s in p.segments]
    assert len(texts) == len(set(texts))
    for s in p.segments:
        assert isinstance(s.text, str) and s.text == " ".join(s.text.split()) and s.text
        names = [e.name for e in s.entities]
        assert names and len(names) == len(set(names)) and all(isinstance(n, str) and n for n in names)
        assert s.completeness is None or 0 <= s.completeness <= 10
        assert all(e.importance is None or 0 <= e.importance <= 100 for e in s.entities)


if given is None:
    def test_property_tests_need_hypothesis():
        pytest.skip("hypothesis is not installed")
else:
    @settings(max_examples=300, deadline=None)
    @given(st.text())
    def test_parse_never_raises_on_arbitrary_text(text):
        check_invariants(parse_nary(text))

    KEYS = st.sampled_from(["segments", "text", "entities", "name", "type", "description", "importance",
                            "completeness", "facts", "entity", "x"])
    JSONISH = st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=12),
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEYS | st.text(max_size=5), inner, max_size=4),
        max_leaves=30)

    @settings(max_examples=300, deadline=None)
    @given(JSONISH, st.integers(min_value=0, max_value=400), st.sampled_from(["", "Here: ", "```json\n"]),
           st.sampled_from(["", "\n```", " ok?"]))
    def test_parse_never_raises_on_json_like_fuzz(value, cut, prefix, suffix):
        text = json.dumps(value)
        for t in (text, prefix + text + suffix, text[:cut], prefix + text[:cut]):
            check_invariants(parse_nary(t))

    NAMES = st.text(st.characters(whitelist_categories=("Lu", "Ll", "Nd")), min_size=1, max_size=8)
    SEGMENTS = st.lists(st.tuples(NAMES, st.lists(NAMES, min_size=1, max_size=3, unique=True)),
                        max_size=5, unique_by=lambda s: s[0])

    @settings(max_examples=150, deadline=None)
    @given(SEGMENTS, st.integers(min_value=0, max_value=2000))
    def test_parse_well_formed_and_truncated_replies(segments, cut):
        text = reply(*(seg(t, *names) for t, names in segments))
        assert kept(parse_nary(text)) == [(t, names) for t, names in segments]
        got = kept(parse_nary(text[:cut]))
        assert got == [(t, names) for t, names in segments][:len(got)]     # a prefix, each segment whole


# ------------------------------------------------------------------ prompt
def test_prompt_is_package_data_and_its_example_parses():
    p = load_nary_prompt()
    assert "{passage}" in p["user_template"] and p["examples"]
    ex = parse_nary(json.dumps(p["examples"][0]["output"]))
    assert ex.ok and ex.dropped == 0 and len(ex.segments) == 3
    msgs = nary_messages("T\nBraces {passage} {x} stay.", p)
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "user"]
    assert msgs[-1]["content"] == "Passage:\nT\nBraces {passage} {x} stay."
    assert p["retry_note"] in nary_messages("x", p, retry=True)[-1]["content"]


# ------------------------------------------------------------------ extractor and results file
def passage_of(messages) -> str:
    return messages[-1]["content"].split("Passage:\n", 1)[1].split("\n\n", 1)[0]


def nary_respond(messages) -> str:
    """Each sentence of the passage is a segment linked to its capitalised phrases and the title."""
    title, body = passage_of(messages).split("\n", 1)
    segs = []
    for sent in re.split(r"(?<=\.) ", body):
        names = list(dict.fromkeys([title, *toy_entities("x\n" + sent)]))
        segs.append({"text": sent, "completeness": 8,
                     "entities": [{"name": n, "type": "name", "importance": 50} for n in names]})
    return json.dumps({"segments": segs})


def ids(docs):
    return {chunk_id(d): d for d in docs}


def extractor(tmp_path, llm, **kw):
    return make_extractor("nary", tmp_path, llm.model_name, lambda: llm, max_new_tokens=256, **kw)


def test_extract_persists_and_resumes(tmp_path):
    llm = ScriptedLLM(nary_respond, name="my/model:1")
    ex = extractor(tmp_path, llm)
    assert isinstance(ex, NaryExtractor) and ex.name == "nary"
    first = ex.extract(ids(CORPUS[:3]))
    assert llm.calls == 3 and first.llm_passages == 3 and first.failed == {} and first.triples is None
    assert ex.path == tmp_path / "nary_results_my_model_1.json" and ex.path.exists()
    he = first.hyperedges[chunk_id(CORPUS[1])]
    assert he == [Hyperedge("Ilse Marrow was born in Velor.", ("Ilse Marrow", "Velor")),
                  Hyperedge("Ilse Marrow studied at Tamsin College.", ("Ilse Marrow", "Tamsin College"))]
    stored = load_nary_file(ex.path)[chunk_id(CORPUS[1])]
    assert stored.passage == CORPUS[1] and stored.segments[0].completeness == 8
    assert stored.segments[0].entities[0].importance == 50
    # a new extractor (a new process) sends only the passages missing from the file
    llm2 = ScriptedLLM(nary_respond, name="my/model:1")
    again = extractor(tmp_path, llm2).extract(ids(CORPUS[:5]))
    assert llm2.calls == 2 and again.llm_passages == 2
    assert set(again.hyperedges) == set(ids(CORPUS[:5])) and again.hyperedges[chunk_id(CORPUS[1])] == he
    assert len(load_nary_file(ex.path)) == 5
    assert extractor(tmp_path, ScriptedLLM(nary_respond, name="other")).path != ex.path


def test_results_saved_as_they_come_so_a_crash_loses_no_llm_work(tmp_path):
    def respond(messages):
        if passage_of(messages) == CORPUS[2]:
            raise RuntimeError("power cut")
        return nary_respond(messages)

    llm = ScriptedLLM(respond)
    llm.max_concurrency = 1
    with pytest.raises(RuntimeError, match="power cut"):
        extractor(tmp_path, llm).extract(ids(CORPUS[:4]))
    saved = load_nary_file(tmp_path / "nary_results_scripted.json")
    assert set(saved) == set(ids(CORPUS[:2]))
    llm2 = ScriptedLLM(nary_respond)
    out = extractor(tmp_path, llm2).extract(ids(CORPUS[:4]))
    assert llm2.calls == 2 and out.failed == {} and len(out.hyperedges) == 4


def test_failures_are_reported_and_retried_next_time(tmp_path):
    bad = {CORPUS[0]: "llm", CORPUS[1]: "garbage", CORPUS[2]: "garbage-once"}
    seen: list[tuple[str, bool]] = []

    def respond(messages):
        passage, retry = passage_of(messages), "could not be read" in messages[-1]["content"]
        seen.append((passage, retry))
        kind = bad.get(passage)
        if kind == "llm":
            raise LLMError("server on fire")
        if kind == "garbage" or (kind == "garbage-once" and not retry):
            return "I am sorry, I cannot produce JSON today."
        return nary_respond(messages)

    ex = extractor(tmp_path, ScriptedLLM(respond))
    out = ex.extract(ids(CORPUS[:4]))
    assert set(out.failed) == {chunk_id(CORPUS[0]), chunk_id(CORPUS[1])}
    assert "server on fire" in out.failed[chunk_id(CORPUS[0])]
    msg = out.failed[chunk_id(CORPUS[1])]
    assert "no list of segments" in msg and "retry" in msg
    assert set(out.hyperedges) == set(ids(CORPUS[2:4]))          # the retry with the reminder worked
    assert (CORPUS[1], True) in seen and (CORPUS[0], True) not in seen    # LLM errors are not re-asked
    assert set(load_nary_file(ex.path)) == set(ids(CORPUS[2:4]))           # failures are not stored
    bad.clear()
    llm = ScriptedLLM(respond)
    again = extractor(tmp_path, llm).extract(ids(CORPUS[:4]))
    assert llm.calls == 2 and again.failed == {} and len(again.hyperedges) == 4


class CutOffLLM(ScriptedLLM):
    def generate(self, messages, *, max_new_tokens=None, temperature=None):
        text = nary_respond(messages)
        return LLMResponse(text=text[: len(text) * 2 // 3], finish_reason="length")


def test_cut_off_reply_keeps_complete_segments(tmp_path):
    doc = "Velor\nVelor is a town in Kaldavia. Velor hosts the Amber Fair. Mira Olt lived in Velor."
    out = extractor(tmp_path, CutOffLLM(nary_respond)).extract(ids([doc]))
    (hs,) = out.hyperedges.values()
    assert 1 <= len(hs) < 3 and hs[0].text == "Velor is a town in Kaldavia."
    assert next(iter(load_nary_file(tmp_path / "nary_results_scripted.json").values())).truncated


@pytest.mark.parametrize("content, match", [
    ("{not json", "not valid JSON"),
    ('{"docs": []}', "format"),
    ('{"format": "hippo-engine/nary", "version": 99, "docs": []}', "version 99"),
    ('{"format": "hippo-engine/nary", "version": 1, "docs": [7]}', r"docs\[0\]"),
    ('{"format": "hippo-engine/nary", "version": 1, "docs": [{"idx": "c", "passage": "p", "segments": '
     '[{"text": "t", "entities": [{"name": 5}]}]}]}', r"docs\[0\].segments\[0\].entities\[0\]"),
])
def test_damaged_results_file_names_the_file(tmp_path, content, match):
    path = tmp_path / "nary_results_scripted.json"
    path.write_text(content, encoding="utf-8")
    ex = extractor(tmp_path, ScriptedLLM(nary_respond))      # read lazily: opening does not fail
    with pytest.raises(ValueError, match=match) as e:
        ex.extract(ids(CORPUS[:1]))
    assert str(path) in str(e.value)
    rag = HippoRAG(tmp_path, extractor="nary", llm=ScriptedLLM(nary_respond), encoder=NgramEncoder(),
                   show_progress=False)
    assert rag.graph_stats()["passage_nodes"] == 0               # the index opens to query or delete
    with pytest.raises(ValueError, match=re.escape(str(path))):
        rag.index(CORPUS[:1])                                    # extraction names the file


def test_results_file_round_trip(tmp_path):
    ex = extractor(tmp_path, ScriptedLLM(nary_respond))
    ex.extract(ids(CORPUS[:2]))
    loaded = load_nary_file(ex.path)
    copy = tmp_path / "copy.json"
    save_nary_file(copy, loaded.values())
    assert copy.read_text(encoding="utf-8") == ex.path.read_text(encoding="utf-8")
    assert [p.name for p in tmp_path.iterdir() if p.suffix == ".tmp"] == []
    with pytest.raises(FileNotFoundError, match="missing.json"):
        load_nary_file(tmp_path / "missing.json")


# ------------------------------------------------------------------ the facade
def nary_rag(path, **kw):
    return HippoRAG(path, extractor="nary", llm=kw.pop("llm", None) or ScriptedLLM(nary_respond),
                    encoder=NgramEncoder(), show_progress=False, use_filter=False,
                    **{"synonymy_threshold": 0.6, **kw})


def test_facade_indexes_segments_as_hyperedges_and_retrieves(tmp_path):
    llm = ScriptedLLM(nary_respond)
    rag = nary_rag(tmp_path, llm=llm)
    rep = rag.index(CORPUS)
    assert rep["added"] == len(CORPUS) and rep["openie_llm_passages"] == len(CORPUS) and llm.calls == len(CORPUS)
    assert rag.index_state.extractor == "nary"
    hs = rag.index_state.passage_hyperedges[chunk_id(CORPUS[1])]
    assert hs[0] == Hyperedge("Ilse Marrow was born in Velor.", ("ilse marrow", "velor"))   # normalised
    ents, facts = rag.index_state.stores["entity"], rag.index_state.stores["fact"]
    for name in ("ilse marrow", "velor", "tamsin college", "kaldavia"):
        assert entity_id(name) in ents and entity_id(name) in rag.graph.node_ids
    assert fact_id("Ilse Marrow was born in Velor.") in facts
    assert facts.text(fact_id("Ilse Marrow was born in Velor.")) == "Ilse Marrow was born in Velor."
    stats = rag.graph_stats()
    assert stats["passage_nodes"] == len(CORPUS) and stats["entity_nodes"] >= 12 and stats["context_edges"] > 0
    calls = llm.calls
    sols = rag.retrieve(["Where was Ilse Marrow born?", "Who founded the Amber Fair?"], num_to_retrieve=3)
    assert llm.calls == calls                                # no filter: retrieval asks no LLM
    assert CORPUS[1] in sols[0].docs and CORPUS[6] in sols[1].docs       # (a toy encoder: gold in the top 3)
    assert sols[0].kept_facts[0] == ("Ilse Marrow was born in Velor.", "mentions", "ilse marrow; velor")
    assert sols[1].kept_facts[0] == ("Mira Olt founded the Amber Fair.", "mentions", "amber fair; mira olt")
    assert rag.index(CORPUS) == {"added": 0} and llm.calls == calls


def test_facade_incremental_equals_batch(tmp_path):
    A, B = CORPUS[:5], CORPUS[5:]
    inc = nary_rag(tmp_path / "inc")
    inc.index(A)
    inc.index(B)
    full = nary_rag(tmp_path / "full")
    full.index(A + B)
    assert_same(snapshot(inc), snapshot(full))
    assert inc.index_state.passage_hyperedges == full.index_state.passage_hyperedges
    full.delete(B)
    only_a = nary_rag(tmp_path / "a")
    only_a.index(A)
    assert_same(snapshot(full), snapshot(only_a))


def test_facade_reports_failed_passages_and_retries_them(tmp_path):
    broken = {CORPUS[3]}

    def respond(messages):
        if passage_of(messages) in broken:
            raise LLMError("rate limited")
        return nary_respond(messages)

    rag = nary_rag(tmp_path, llm=ScriptedLLM(respond))
    with pytest.raises(OpenIEError) as e:
        rag.index(CORPUS)
    assert list(e.value.failed) == [chunk_id(CORPUS[3])] and "rate limited" in str(e.value)
    assert not rag.index_state.has_passage(chunk_id(CORPUS[3]))
    broken.clear()
    rep = rag.index(CORPUS)
    assert rep["added"] == 1 and rep["openie_llm_passages"] == 1


def test_facade_with_a_real_http_server(tmp_path):
    text = reply(seg("Brask is the capital of Kaldavia.", "Brask", "Kaldavia"),
                 seg("Brask lies on the Tamsin River.", "Brask", "Tamsin River"))
    with FakeOpenAIServer([("ok", f"```json\n{text}\n```", "stop")]) as srv:
        rag = HippoRAG(tmp_path, "served/model", extractor="nary", llm_base_url=srv.base_url, llm_max_retries=0,
                       llm_timeout=5.0, encoder=NgramEncoder(), show_progress=False, use_filter=False)
        rep = rag.index([CORPUS[5]])
        sols = rag.retrieve(["What is the capital of Kaldavia?"], num_to_retrieve=1)
    assert rep["added"] == 1 and srv.count == 1
    body = srv.requests[0]["body"]
    assert body["model"] == "served/model" and body["messages"][0]["content"] == load_nary_prompt()["system"]
    assert body["messages"][-1]["content"].endswith(CORPUS[5])
    assert (tmp_path / "nary_results_served_model.json").exists()
    assert rag.index_state.passage_hyperedges[chunk_id(CORPUS[5])] == [
        Hyperedge("Brask is the capital of Kaldavia.", ("brask", "kaldavia")),
        Hyperedge("Brask lies on the Tamsin River.", ("brask", "tamsin river"))]
    assert sols[0].docs == [CORPUS[5]]


def test_unusable_replies_are_reported_as_unparseable_and_discarded_from_the_cache(tmp_path):
    from hippo_engine.llm.cache import CachedLLM
    fixed = []

    def respond(messages):
        if passage_of(messages) == CORPUS[1] and not fixed:
            return "I am sorry, I cannot produce JSON today."
        if passage_of(messages) == CORPUS[2]:
            return '{"segments": []}'                      # a passage without facts: no failure
        return nary_respond(messages)

    inner = ScriptedLLM(respond)
    cache = CachedLLM(inner, tmp_path / "cache.sqlite")
    out = extractor(tmp_path, cache).extract(ids(CORPUS[:3]))
    bad = chunk_id(CORPUS[1])
    assert list(out.failed) == [bad]
    assert out.failed[bad].startswith("n-ary facts: unparseable reply: 'I am sorry, I cannot produce JSON")
    assert out.hyperedges[chunk_id(CORPUS[2])] == []
    assert inner.calls == 4 and len(cache) == 2           # both bad replies (ask + retry) were discarded
    fixed.append(True)
    again = extractor(tmp_path, cache).extract(ids(CORPUS[:3]))
    assert again.failed == {} and inner.calls == 5 and len(again.hyperedges[bad]) == 2
