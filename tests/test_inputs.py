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
    with pytest.raises(ValueError, match=r"queries must be non-empty strings; items \[0\]"):
        check_queries(["  ", "ok"], "retrieve")
    with pytest.raises(TypeError, match="list of query strings"):
        check_queries("one string", "retrieve")
    check_documents(["", "text"], "index")     # blank documents are skipped later, not refused
