"""Inputs checked at the door: lone surrogates, non-strings and bad counts name the item."""
from __future__ import annotations

import pytest
from helpers import CORPUS, make_rag

from hippo_engine.inputs import check_documents, check_queries, positive_count, surrogate_at


def test_surrogate_at_finds_the_first_lone_surrogate():
    assert surrogate_at("plain text, ünïcode ✓") is None
    assert surrogate_at("ab\ud800cd") == 2
    assert surrogate_at("x\udcff") == 1


def test_documents_with_a_lone_surrogate_are_refused_naming_the_item(tmp_path):
    rag = make_rag(tmp_path / "idx")
    docs = [CORPUS[0], "Broken\nbytes \udce9 decoded with surrogateescape"]
    msg = r"index\(\): document 1 contains a lone surrogate \(U\+DCE9\) at character 13"
    with pytest.raises(ValueError, match=msg):
        rag.index(docs)
    assert len(rag.index_state) == 0          # nothing half-indexed
    rag.index(CORPUS[:2])
    with pytest.raises(ValueError, match=r"delete\(\): document 0 contains a lone surrogate"):
        rag.delete(["\ud800"])
    assert len(rag.index_state) == 2


def test_queries_with_a_lone_surrogate_are_refused_naming_the_item(tmp_path):
    rag = make_rag(tmp_path / "idx", use_filter=False)
    rag.index(CORPUS[:3])
    with pytest.raises(ValueError, match=r"retrieve\(\): query 2 contains a lone surrogate"):
        rag.retrieve(["Where is Velor?", "Who is Ilse Marrow?", "bad \ud83d query"])
    with pytest.raises(ValueError, match=r"\(\): query 0 contains a lone surrogate"):
        rag.rag_qa(["\udfff"])
    assert len(rag.retrieve(["Where is Velor?"])) == 1


@pytest.mark.parametrize("value", [0, -3, 2.5, "3", True])
def test_positive_count_refuses_everything_but_positive_ints(value):
    with pytest.raises(ValueError, match="num_to_retrieve must be a positive integer"):
        positive_count(value, "num_to_retrieve")
    assert positive_count(None, "k") is None and positive_count(4, "k") == 4


def test_check_helpers_name_non_strings_and_blank_queries():
    with pytest.raises(TypeError, match=r"items \[1\] are not"):
        check_documents(["a", 3], "index")
    with pytest.raises(ValueError, match=r"retrieve\(\): query 0 is empty \(counting from 0\); every query needs"):
        check_queries(["  ", "ok"], "retrieve")
    with pytest.raises(ValueError, match=r"queries 0, 2 are empty"):
        check_queries(["", "ok", " "], "retrieve")
    with pytest.raises(TypeError, match="list of query strings"):
        check_queries("one string", "retrieve")
    check_documents(["", "text"], "index")     # blank documents are skipped later, not refused


def test_ids_with_nul_or_over_the_byte_limit_are_refused_before_anything_is_written(tmp_path):
    """Ids are checked the same way on every backend (SQLite accepted these, PostgreSQL failed deep
    inside the driver): no NUL, at most 1,024 UTF-8 bytes; the error names the item."""
    from hippo_engine.inputs import MAX_ID_BYTES, check_document_ids
    assert MAX_ID_BYTES == 1024
    assert check_document_ids(["é" * 512], 1, "index") == ["é" * 512]          # exactly 1,024 bytes
    with pytest.raises(ValueError, match=r"ids item 1 is 1,026 UTF-8 bytes long .*limited to 1,024"):
        check_document_ids(["ok", "é" * 513], 2, "index")
    with pytest.raises(ValueError, match=r"ids item 0 contains a NUL character .* at position 1"):
        check_document_ids(["a\x00b"], None, "delete")
    rag = make_rag(tmp_path / "m")
    for bad in ("x" * 2000, "doc\x00one"):
        with pytest.raises(ValueError, match="index\\(\\): ids item 1"):
            rag.index(CORPUS[:2], ids=["fine", bad])
    assert len(rag.index_state) == 0                                   # nothing was written
    with pytest.raises(ValueError, match="delete\\(\\): ids item 0"):
        rag.delete(ids=["y" * 1025])
    rag.close()


def test_cli_refuses_an_over_long_id_with_exit_status_2(tmp_path, capsys, monkeypatch):
    import json

    from fakes import NgramEncoder, ScriptedLLM
    from helpers import toy_respond

    from hippo_engine import HippoRAG
    from hippo_engine.cli import main
    enc, llm = NgramEncoder(), ScriptedLLM(toy_respond)
    monkeypatch.setattr(HippoRAG, "encoder", property(lambda self: enc))
    monkeypatch.setattr(HippoRAG, "llm", property(lambda self: llm))
    corpus = tmp_path / "c.json"
    corpus.write_text(json.dumps([{"id": "n" * 3000, "text": CORPUS[0]}]))
    assert main(["index", str(corpus), "--save-dir", str(tmp_path / "idx"), "--quiet"]) == 2
    assert "limited to 1,024 bytes" in capsys.readouterr().err


def test_document_records_are_checked_once_in_the_words_every_door_uses():
    """Issue 40: one check of a document record (the service's queue, its HTTP and MCP doors); a
    ``Document`` passes as a dict does; the messages name the field and say the rule in RULES' words."""
    import re

    from hippo_engine.datatypes import Document
    from hippo_engine.ids import document_id
    from hippo_engine.inputs import ID_PATTERN, RULES, TEXT_PATTERN, check_document_records

    docs = check_document_records([{"text": "body", "title": "T"}, Document("d2", "x", "", {"k": 1})])
    assert docs == [Document(document_id("T\nbody"), "body", "T", None), Document("d2", "x", None, {"k": 1})]
    assert [d.indexed_text for d in docs] == ["T\nbody", "x"]
    for bad, msg in [({"text": "a\x00"}, f"documents[0].text: {RULES[TEXT_PATTERN]}"),
                     ({"text": "a", "title": "x\ny"}, "documents[0].title: must be one line"),
                     ({"text": "a", "id": "x" * 513}, "documents[0].id: 513 characters long; the limit is 512"),
                     ({"text": "a", "id": "a\nb"}, f"documents[0].id: {RULES[ID_PATTERN]}"),
                     ({"text": 3}, "documents[0].text: must be text (a string)"),
                     ({"text": "a", "metadata": {"k": "\x00"}}, "documents[0].metadata['k']: text with a NUL")]:
        with pytest.raises(ValueError, match=re.escape(msg)):
            check_document_records([bad])


def test_passage_text_is_the_one_title_join():
    from hippo_engine.datatypes import passage_text

    assert passage_text("Title", "body") == "Title\nbody"
    assert passage_text(None, "body") == "body"
