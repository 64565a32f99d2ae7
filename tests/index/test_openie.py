"""OpenIE: parsing model output (malformed, truncated, fenced), file formats, failures."""
import json

import pytest
from fakes import ScriptedLLM

from hippo_engine.index.openie import (
    OpenIE,
    load_openie_file,
    ner_messages,
    parse_ner,
    parse_triples,
    save_openie_file,
    triple_messages,
)
from hippo_engine.llm.base import LLMTimeoutError
from hippo_engine.text import mdhash_id, normalize_phrase, parse_json_lenient


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
    assert idx == mdhash_id("T\nBody", "chunk-") and r.entities == ["T"] and r.triples == [("T", "is", "Body")]
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
    results, failed = OpenIE(ScriptedLLM(respond), show_progress=False).run({"a": "Good passage", "b": "Bad passage"})
    assert set(results) == {"a"} and set(failed) == {"b"} and "timed out" in failed["b"]
    assert results["a"].triples == [("Good", "is", "fine")]


def test_import_refuses_an_idx_that_is_not_its_passages_id(tmp_path, caplog):
    import json

    from hippo_engine.index.openie import load_openie_file
    from hippo_engine.text import mdhash_id

    good, other = "A\nAlpha text.", "B\nBeta text."
    path = tmp_path / "openie.json"
    path.write_text(json.dumps({"docs": [
        {"idx": mdhash_id(good, "chunk-"), "passage": good, "extracted_entities": ["Alpha"],
         "extracted_triples": [["alpha", "is", "text"]]},
        {"idx": mdhash_id(good, "chunk-"), "passage": other, "extracted_entities": ["evil"],
         "extracted_triples": [["evil", "injected", "fact"]]}]}))
    loaded = load_openie_file(path)
    assert list(loaded) == [mdhash_id(good, "chunk-")]
    assert loaded[mdhash_id(good, "chunk-")].triples == [("alpha", "is", "text")]
    assert "1 entry skipped" in caplog.text and str(path) in caplog.text
