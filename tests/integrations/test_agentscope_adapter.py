"""The AgentScope knowledge base behind AgentScope's own Agent and RAGMiddleware, on a real memory."""
from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("agentscope", reason="needs the agentscope extra")
from agentscope.message import TextBlock  # noqa: E402
from agentscope.rag import Chunk, KnowledgeBase  # noqa: E402

from hippo_engine.integrations.agentscope import HippoKnowledgeBase  # noqa: E402
from hippo_engine.integrations.examples import agentscope_agent  # noqa: E402

QUESTION = "In which city was the founder of the Vellmar Observatory born?"


def test_example_agent_answers_from_the_knowledge_base(tmp_path, server, sent):
    out = agentscope_agent.main(["--save-dir", str(tmp_path), "--base-url", server.base_url, "--top-k", "3"])
    assert out["answer"] == "Dunhaven"          # the middleware put Ilse Marrow's passage before the model
    assert out["sources"][0]["title"] == "Vellmar Observatory"
    (prompt,) = sent(server)
    assert "retrieved from the knowledge base" in prompt and "(source: Ilse Marrow)" in prompt


def test_search_merges_queries_and_carries_our_metadata(rag):
    kb = HippoKnowledgeBase(rag, explain=True)
    assert isinstance(kb, KnowledgeBase)
    one = asyncio.run(kb.search([QUESTION], top_k=3))
    (sol,) = rag.retrieve([QUESTION], 3)
    assert [r.chunk.metadata["hippo_passage_id"] for r in one] == sol.passage_ids
    assert [r.document_id for r in one] == [d[0] for d in sol.doc_ids]
    assert one[0].chunk.source == "Vellmar Observatory" and one[0].chunk.metadata["hippo_explanation"]["seeds"]
    two = asyncio.run(kb.search([QUESTION, TextBlock(text="Who wrote The Glass Orchard?")], top_k=6))
    ids = [r.chunk.metadata["hippo_passage_id"] for r in two]
    assert len(ids) == len(set(ids)) and set(sol.passage_ids) <= set(ids)     # merged, no duplicates
    assert [r.score for r in two] == sorted((r.score for r in two), reverse=True)
    (top,) = asyncio.run(kb.search([QUESTION], top_k=5, score_threshold=one[0].score))
    assert (top.document_id, top.score) == (one[0].document_id, one[0].score)
    bob = asyncio.run(HippoKnowledgeBase(rag, where={"user": "bob"}, mode="naive").search([QUESTION], top_k=3))
    assert bob and all(r.chunk.metadata["hippo_documents"][r.document_id]["user"] == "bob" for r in bob)


def test_documents_in_and_out(tmp_path):
    kb = HippoKnowledgeBase(tmp_path, rag_options={"extractor": "ner", "show_progress": False})
    chunks = [Chunk(content=TextBlock(text="Corvel University was founded in 1702 in Dunhaven."), source="Corvel",
                    chunk_index=0, total_chunks=2, metadata={"page": 1}),
              Chunk(content=TextBlock(text="Its library holds the Marrow star catalogue."), source="Corvel",
                    chunk_index=1, total_chunks=2)]

    async def run() -> None:
        assert await kb.insert_document(chunks, document_id="corvel", document_metadata={"lang": "en"}) == "corvel"
        (summary,) = await kb.list_documents()
        assert (summary.document_id, summary.source, summary.chunk_count) == ("corvel", "Corvel", 1)
        assert summary.metadata == {"lang": "en", "page": 1}
        (chunk,) = await kb.list_chunks("corvel")
        assert chunk.content.text.startswith("Corvel\nCorvel University") and "Marrow star" in chunk.content.text
        (hit,) = await kb.search(["Where is the Marrow star catalogue kept?"], top_k=1)
        assert hit.document_id == "corvel" and hit.chunk.metadata["hippo_documents"]["corvel"]["lang"] == "en"
        await kb.delete_document("corvel")
        assert await kb.list_documents() == []
        with pytest.raises(ValueError, match="no text"):
            await kb.insert_document([Chunk(content=TextBlock(text=" "), source="x", chunk_index=0, total_chunks=1)])
    asyncio.run(run())


def test_an_option_the_knowledge_base_does_not_take_is_refused(rag):
    """AgentScope's convention (issue 39): ``top_k`` comes with each search; another spelling or an unknown option
    is a TypeError that names it and what to use instead, in the constructor and in search()."""
    with pytest.raises(TypeError, match=r"no option 'top_k' \(AgentScope gives top_k with each search"):
        HippoKnowledgeBase(rag, top_k=3)
    with pytest.raises(TypeError, match=r"'metadata_filter' \(filter by document metadata with where="):
        HippoKnowledgeBase(rag, metadata_filter={"user": "bob"})
    kb = HippoKnowledgeBase(rag)
    with pytest.raises(TypeError, match=r"search\(\) has no option 'k' \(the number of chunks is search\(\)'s top_k"):
        asyncio.run(kb.search([QUESTION], k=2))
    assert len(asyncio.run(kb.search([QUESTION], top_k=2))) == 2
