"""OpenIE: parsing model output (malformed, truncated, fenced), file formats, failures."""
import json

import pytest
from fakes import ScriptedLLM

from hippo_engine.ids import chunk_id
from hippo_engine.index.openie import (
    OpenIE,
    load_openie_file,
    ner_messages,
    parse_ner,
    parse_triples,
    save_openie_file,
    triple_messages,
)
from hippo_engine.lenient_json import parse_json_lenient
from hippo_engine.llm.base import LLMTimeoutError
from hippo_engine.normalize import normalize_phrase


def test_parse_variants():
    assert parse_ner('{"named_entities": ["A", "B", "A", 3, ""]}') == ["A", "B"]
    assert parse_ner("Here you go:\n```json\n{\"named_entities\": [\"X\"]}\n```") == ["X"]
    assert parse_ner("no json at all") == []
    # truncated mid-item: complete items are kept
    truncated = '{"triples": [["a", "b", "c"], ["d", "e", "f"], ["g", "h'
    assert parse_triples(truncated) == [("a", "b", "c"), ("d", "e", "f")]
    mixed = '{"triples": [["a", "b", "c"], ["a", "b", "c"], ["x", "y"], ["p", null, "q"]]}'
    assert parse_triples(mixed) == [("a", "b", "c")]
    assert parse_triples('{"triples": "oops"}') == []


def test_parse_json_never_evaluates():
    with pytest.raises(ValueError):
        parse_json_lenient("__import__('os').system('echo pwned')")


def test_prompts_have_examples_and_inputs():
    m = ner_messages("Some passage")
    assert m[0]["role"] == "system" and m[-1]["content"].endswith("Some passage")
    assert any(x["role"] == "assistant" for x in m)
    t = triple_messages("Some passage", ["Some"])
    assert '["Some"]' in t[-1]["content"]


def test_normalization_modes():
    assert normalize_phrase("Ángel Di-María!") == "ángel di maría"
    assert normalize_phrase("Ángel Di-María!", "reference") == "ngel di mar a"
    assert normalize_phrase("東京", "reference") == ""
    assert normalize_phrase("東京") == "東京"


def test_v1_file_with_nan(tmp_path):
    p = tmp_path / "v1.json"
    p.write_text('{"docs": [{"title": "T", "text": "Body", "passage": "T\\nBody", "extracted_entities": ["T", NaN],'
                 ' "extracted_triples": [["T", "is", "Body"], ["T", NaN, "x"], ["bad"]]}], "avg_ent_chars": NaN}')
    res = load_openie_file(p)
    (idx, r), = res.items()
    assert idx == chunk_id("T\nBody") and r.entities == ["T"] and r.triples == [("T", "is", "Body")]
    out = tmp_path / "ref.json"
    save_openie_file(out, res.values())
    data = json.loads(out.read_text())
    assert data["docs"][0]["idx"] == idx and set(data) >= {"docs", "avg_ent_chars", "avg_ent_words"}
    assert load_openie_file(out)[idx].triples == r.triples


def test_bad_files(tmp_path):
    with pytest.raises(FileNotFoundError):
        load_openie_file(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        load_openie_file(tmp_path / "bad.json")


def test_released_musique_file_loads(musique_dir):
    res = load_openie_file(next(musique_dir.glob("openie_*.json")))
    assert len(res) == 1890
    assert all(len(t) == 3 for r in res.values() for t in r.triples)


def test_llm_failures_are_reported_not_raised():
    def respond(messages):
        if "Bad" in messages[-1]["content"]:
            raise LLMTimeoutError("timed out after 3 tries")
        if "Named entities:" in messages[-1]["content"]:
            return '{"triples": [["Good", "is", "fine"]'  # truncated
        return '{"named_entities": ["Good"]}'
    results, failed = OpenIE(ScriptedLLM(respond)).run({"a": "Good passage", "b": "Bad passage"})
    assert set(results) == {"a"} and set(failed) == {"b"} and "timed out" in failed["b"]
    assert results["a"].triples == [("Good", "is", "fine")]


def test_import_refuses_an_idx_that_is_not_its_passages_id(tmp_path, caplog):
    import json

    from hippo_engine.ids import chunk_id
    from hippo_engine.index.openie import load_openie_file

    good, other = "A\nAlpha text.", "B\nBeta text."
    path = tmp_path / "openie.json"
    path.write_text(json.dumps({"docs": [
        {"idx": chunk_id(good), "passage": good, "extracted_entities": ["Alpha"],
         "extracted_triples": [["alpha", "is", "text"]]},
        {"idx": chunk_id(good), "passage": other, "extracted_entities": ["evil"],
         "extracted_triples": [["evil", "injected", "fact"]]}]}))
    loaded = load_openie_file(path)
    assert list(loaded) == [chunk_id(good)]
    assert loaded[chunk_id(good)].triples == [("alpha", "is", "text")]
    assert "1 entry skipped" in caplog.text and str(path) in caplog.text


def test_read_ner_and_triples_raise_on_unreadable_replies_but_accept_empty_lists():
    from hippo_engine.index.openie import read_ner, read_triples
    assert read_ner('{"named_entities": []}') == [] and read_ner("[]") == []
    assert read_triples('{"triples": []}') == []
    for bad in ("I cannot do that.", '{"answer": "none"}', '{"named_entities": "X"}', ""):
        with pytest.raises(ValueError):
            read_ner(bad)
    for bad in ("no triples here", '{"named_entities": []}', '{"triples": "oops"}'):
        with pytest.raises(ValueError):
            read_triples(bad)


def _flaky_openie(bad_stage):
    """NER/triple responder whose reply for the passage 'Bad ...' is prose at ``bad_stage``."""
    state = {"fixed": False}

    def respond(messages):
        user = messages[-1]["content"]
        stage = "triples" if "Named entities:" in user else "ner"
        if "Bad" in user and stage == bad_stage and not state["fixed"]:
            return "Sorry, I cannot help with that passage." + " blah" * 50
        return '{"triples": [["Bad", "is", "x"]]}' if stage == "triples" else '{"named_entities": []}'
    return respond, state


@pytest.mark.parametrize("stage", ["ner", "triples"])
def test_unparseable_reply_fails_the_passage_and_is_not_cached(tmp_path, stage):
    from hippo_engine.llm.cache import CachedLLM
    respond, state = _flaky_openie(stage)
    inner = ScriptedLLM(respond)
    llm = CachedLLM(inner, tmp_path / "cache.sqlite")
    results, failed = OpenIE(llm).run({"a": "Good passage", "b": "Bad passage"})
    assert set(results) == {"a"} and set(failed) == {"b"}
    label = "NER" if stage == "ner" else "triples"
    assert failed["b"].startswith(f"{label}: unparseable reply: 'Sorry, I cannot help")
    assert len(failed["b"]) < 150                       # the first 100 characters only
    assert results["a"].entities == [] and results["a"].triples == [("Bad", "is", "x")]  # [] is no failure
    # a rerun asks the model again instead of reading the bad reply back from the cache
    state["fixed"] = True
    calls = inner.calls
    results, failed = OpenIE(llm).run({"b": "Bad passage"})
    assert failed == {} and set(results) == {"b"}
    assert inner.calls == calls + (2 if stage == "ner" else 1)   # a good NER reply stays cached


def test_index_raises_naming_the_passage_with_an_unparseable_reply_and_indexes_the_rest(tmp_path):
    from helpers import CORPUS, make_rag, toy_respond

    from hippo_engine.index.openie import OpenIEError

    def respond(messages):
        if "Oren Pike was a geologist" in messages[-1]["content"]:
            return "I am unable to extract entities."
        return toy_respond(messages)

    rag = make_rag(tmp_path, llm=ScriptedLLM(respond))
    with pytest.raises(OpenIEError, match="unparseable reply") as ei:
        rag.index(CORPUS[:6])
    (bad,) = ei.value.failed
    assert bad == chunk_id(CORPUS[4])
    assert rag.graph_stats()["passage_nodes"] == 5
    rag2 = make_rag(tmp_path)
    rag2.index(CORPUS[:6])
    assert rag2.graph_stats()["passage_nodes"] == 6


def _doc(passage, ents=("A",), triples=(("A", "is", "B"),)):
    return {"passage": passage, "extracted_entities": list(ents), "extracted_triples": [list(t) for t in triples]}


@pytest.mark.parametrize(("content", "match"), [
    (b"\x89PNG\r\n\x1a\n\x00\xff\xfe garbage" + bytes(range(256)), "is not UTF-8 text"),
    ('{"docs": [{"passage": "Caf\xe9 in M\xfcnchen"}]}'.encode("latin-1"), "is not UTF-8 text"),
    (b'{"docs": [{"passage": "half \xed\xa0\x80 surrogate"}]}', "is not UTF-8 text"),
    (b'{"docs": ' + b"[" * 100_000, "not valid JSON|nests too deeply"),
    (b'{"docs": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "nests too deeply"),
])
def test_unreadable_openie_files_raise_value_error_naming_the_file(tmp_path, content, match):
    p = tmp_path / "openie.json"
    p.write_bytes(content)
    with pytest.raises(ValueError, match=match) as ei:
        load_openie_file(p)
    assert str(p) in str(ei.value)


@pytest.mark.parametrize("bad", [_doc("lone \ud800 surrogate"), _doc("fine", ents=["x\udfff"]),
                                 _doc("fine", triples=[("a", "b\ud83d", "c")])])
def test_lone_surrogates_name_the_file_and_the_entry(tmp_path, bad):
    p = tmp_path / "openie.json"
    p.write_text(json.dumps({"docs": [_doc("good passage"), bad]}), encoding="utf-8")   # \\ud800 escapes
    with pytest.raises(ValueError, match=r"docs\[1\].*lone surrogate") as ei:
        load_openie_file(p)
    assert str(p) in str(ei.value)
