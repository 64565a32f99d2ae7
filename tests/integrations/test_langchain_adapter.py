"""The LangChain retriever in an LCEL chain (LangChain's own runnables), on a real memory."""
from __future__ import annotations

import pytest

pytest.importorskip("langchain_core", reason="needs the langchain extra")
from langchain_core.retrievers import BaseRetriever  # noqa: E402

from hippo_engine.integrations.examples import langchain_chain  # noqa: E402
from hippo_engine.integrations.langchain import HippoRetriever  # noqa: E402

QUESTION = "In which city was the founder of the Vellmar Observatory born?"


def test_example_chain_answers_from_the_retrieved_passages(tmp_path, server, sent):
    out = langchain_chain.main(["--save-dir", str(tmp_path), "--base-url", server.base_url, "--top-k", "3"])
    assert out["answer"] == "Dunhaven"
    assert out["sources"][0]["title"] == "Vellmar Observatory"
    (prompt,) = sent(server)
    assert "[3] Ilse Marrow" in prompt


def test_retriever_documents_and_per_call_options(rag):
    retriever = HippoRetriever(rag, top_k=3, explain=True)
    assert isinstance(retriever, BaseRetriever)
    docs = retriever.invoke(QUESTION)
    (sol,) = rag.retrieve([QUESTION], 3)
    assert [d.id for d in docs] == sol.passage_ids and [d.page_content for d in docs] == sol.docs
    assert [d.metadata["hippo_rank"] for d in docs] == [1, 2, 3]
    assert docs[0].metadata["hippo_explanation"]["passage_id"] == docs[0].id
    naive = retriever.invoke(QUESTION, top_k=2, mode="naive", where={"user": "alice"})
    (dense,) = rag.retrieve([QUESTION], 2, mode="naive", where={"user": "alice"})
    assert [d.id for d in naive] == dense.passage_ids and naive[0].metadata["hippo_mode"] == "naive"
    assert all(d.metadata["hippo_documents"][d.metadata["hippo_doc_ids"][0]]["user"] == "alice" for d in naive)
    assert [len(b) for b in retriever.batch([QUESTION, "Who wrote The Glass Orchard?"])] == [3, 3]


def test_k_is_langchains_name_for_the_number_of_documents(rag):
    """LangChain's convention (issue 39): ``k`` in the constructor and per call, as its own retrievers take it;
    ``top_k`` still works, both at once differing is a TypeError, an unknown option too."""
    assert len(HippoRetriever(rag, k=2).invoke(QUESTION)) == 2 and HippoRetriever(rag, k=2).k == 2
    retriever = HippoRetriever(rag)
    assert retriever.k == 5 and len(retriever.invoke(QUESTION)) == 5
    assert len(retriever.invoke(QUESTION, k=1)) == 1 and len(retriever.invoke(QUESTION, top_k=3)) == 3
    with pytest.raises(TypeError, match="k or top_k"):
        HippoRetriever(rag, k=2, top_k=3)
    with pytest.raises(TypeError):
        retriever.invoke(QUESTION, n_results=2)


def test_an_option_the_retriever_does_not_take_is_refused(rag):
    """Issue 39: the constructor refused nothing (pydantic dropped unknown fields: ``search_kwargs={"k": 1}`` gave 5
    documents); now an unknown option is a TypeError naming it, in the constructor and per call, while LangChain's
    own retriever fields still work."""
    with pytest.raises(TypeError, match=r"no option 'search_kwargs' \(give k=, where=, mode= directly\)"):
        HippoRetriever(rag, search_kwargs={"k": 1})
    with pytest.raises(TypeError, match=r"no option 'n_results'; its options: memory, k, top_k"):
        HippoRetriever(rag, n_results=2)
    with pytest.raises(TypeError, match=r"invoke\(\) has no option 'similarity_top_k' \(LangChain's number"):
        HippoRetriever(rag).invoke(QUESTION, similarity_top_k=2)
    tagged = HippoRetriever(rag, k=1, tags=["memory"], metadata={"team": "red"})
    assert tagged.tags == ["memory"] and tagged.metadata == {"team": "red"} and len(tagged.invoke(QUESTION)) == 1
