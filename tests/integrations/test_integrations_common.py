"""What the adapters share: options, errors, and the message when a framework is missing."""
from __future__ import annotations

import pytest

from hippo_engine.integrations.common import MemorySearch, missing_extra


def test_missing_framework_names_the_extra():
    err = missing_extra("haystack", ImportError("No module named 'haystack'"))
    assert 'pip install "hippo-engine[haystack]"' in str(err) and "No module named 'haystack'" in str(err)


def test_bad_options_are_refused(rag, tmp_path):
    with pytest.raises(ValueError, match="top_k"):
        MemorySearch(rag, top_k=0)
    with pytest.raises(TypeError, match="save folder"):
        MemorySearch(rag, rag_options={"extractor": "ner"})
    with pytest.raises(TypeError, match="HippoRAG or a save folder"):
        MemorySearch(42)
    with pytest.raises(ValueError, match="non-empty"):
        MemorySearch(rag).search("  ")


def test_hits_follow_the_solution(rag):
    q = "Who was the husband of the author of The Glass Orchard?"
    hits = MemorySearch(rag, top_k=4).search(q)
    (sol,) = rag.retrieve([q], 4)
    assert [h.passage_id for h in hits] == sol.passage_ids and [h.rank for h in hits] == [1, 2, 3, 4]
    assert set(hits[0].metadata()) == {"hippo_passage_id", "hippo_doc_ids", "hippo_score", "hippo_rank",
                                       "hippo_mode", "hippo_documents"}
