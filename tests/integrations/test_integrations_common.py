"""What the adapters share: options, errors, and the message when a framework is missing."""
from __future__ import annotations

import pytest

from hippo_engine.config import MODES
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


def test_frameworks_load_only_with_their_adapter_and_a_missing_one_names_its_extra():
    import subprocess
    import sys

    code = """
import sys
import hippo_engine, hippo_engine.integrations, hippo_engine.integrations.common
loaded = [m for m in ("haystack", "agentscope", "langchain_core", "llama_index") if m in sys.modules]
assert not loaded, loaded
pairs = (("haystack", "haystack"), ("agentscope", "agentscope"), ("langchain_core", "langchain"),
         ("llama_index", "llamaindex"))
for module, extra in pairs:         # the adapter module and its extra have the same name
    sys.modules[module] = None          # as if the framework were not installed
    try:
        __import__("hippo_engine.integrations." + extra)
    except ImportError as e:
        assert f'pip install "hippo-engine[{extra}]"' in str(e), str(e)
    else:
        raise AssertionError(extra + " imported without " + module)
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


@pytest.mark.parametrize("mode", MODES)
def test_every_mode_passes_through(rag, mode):
    q = "In which city was the founder of the Vellmar Observatory born?"
    hits = MemorySearch(rag, mode=mode, top_k=3, where={"user": "alice"}).search(q)
    (sol,) = rag.retrieve([q], 3, mode=mode, where={"user": "alice"})
    assert [h.passage_id for h in hits] == sol.passage_ids and all(h.mode == mode for h in hits)
    assert all(h.documents[h.doc_ids[0]]["user"] == "alice" for h in hits)
