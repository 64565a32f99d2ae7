"""The LlamaIndex retriever in LlamaIndex's own RetrieverQueryEngine, on a real memory."""
from __future__ import annotations

import pytest

pytest.importorskip("llama_index.core", reason="needs the llamaindex extra")
from llama_index.core.schema import MetadataMode  # noqa: E402

from hippo_engine.integrations.examples import llamaindex_query  # noqa: E402
from hippo_engine.integrations.llamaindex import HippoRetriever  # noqa: E402

QUESTION = "In which city was the founder of the Vellmar Observatory born?"


def test_example_query_engine_answers_from_the_retrieved_passages(tmp_path, server, sent):
    out = llamaindex_query.main(["--save-dir", str(tmp_path), "--base-url", server.base_url, "--top-k", "3"])
    assert out["answer"] == "Dunhaven"
    assert [s["title"] for s in out["sources"]][0] == "Vellmar Observatory"
    (prompt,) = sent(server)
    assert "hippo_" not in prompt             # our metadata stays out of the LLM's text


def test_retriever_nodes_carry_ids_scores_and_metadata(rag):
    nodes = HippoRetriever(rag, top_k=3, mode="hi_local", explain=True).retrieve(QUESTION)
    (sol,) = rag.retrieve([QUESTION], 3, mode="hi_local")
    assert [n.node.node_id for n in nodes] == sol.passage_ids
    assert [n.score for n in nodes] == pytest.approx([float(s) for s in sol.doc_scores])
    meta = nodes[0].node.metadata
    assert meta["hippo_rank"] == 1 and meta["hippo_mode"] == "hi_local"
    assert meta["hippo_explanation"]["kind"] == "passage"
    assert nodes[0].node.get_content(metadata_mode=MetadataMode.LLM) == sol.docs[0]
    bob = HippoRetriever(rag, top_k=2, where={"user": "bob"}).retrieve(QUESTION)
    assert bob and all(n.node.metadata["hippo_documents"][n.node.metadata["hippo_doc_ids"][0]]["user"] == "bob"
                       for n in bob)


def test_similarity_top_k_is_llamaindexs_name_for_the_number_of_passages(rag):
    """LlamaIndex's convention (issue 39): ``similarity_top_k`` as its own retrievers take it; ``top_k`` still
    works, both differing is a TypeError."""
    retriever = HippoRetriever(rag, similarity_top_k=2)
    assert retriever.similarity_top_k == 2 and len(retriever.retrieve(QUESTION)) == 2
    assert HippoRetriever(rag).similarity_top_k == 5 and len(HippoRetriever(rag, top_k=3).retrieve(QUESTION)) == 3
    with pytest.raises(TypeError, match="similarity_top_k or top_k"):
        HippoRetriever(rag, similarity_top_k=2, top_k=3)


def test_an_option_the_retriever_does_not_take_is_refused(rag):
    """Issue 39: an unknown option is a TypeError naming it and LlamaIndex's spelling; LlamaIndex's own
    ``BaseRetriever`` options still pass through."""
    with pytest.raises(TypeError, match=r"no option 'k' \(LlamaIndex's number of passages is similarity_top_k\)"):
        HippoRetriever(rag, k=2)
    with pytest.raises(TypeError, match=r"no option 'n_results'; its options: memory, similarity_top_k"):
        HippoRetriever(rag, n_results=2)
    assert len(HippoRetriever(rag, similarity_top_k=1, verbose=True).retrieve(QUESTION)) == 1
