"""The documented contract of each framework's component kind, checked with the framework's own machinery, where
the framework publishes no conformance suite of its own (issue 39; LangChain's is run in
test_langchain_standard.py):

- Haystack publishes conformance tests for document stores only (``haystack.testing.document_store``), none for
  components: a component declares typed input and output sockets (``Pipeline.inputs()``/``outputs()``), connects
  to other components by type, runs in ``Pipeline.run`` and ``Pipeline.run_async``, and serialises with
  ``component_to_dict``/``component_from_dict``;
- LlamaIndex ships no tests in ``llama-index-core``: a ``BaseRetriever`` answers ``retrieve`` and ``aretrieve``
  with a string or a ``QueryBundle``, returning ``NodeWithScore`` objects;
- AgentScope ships no tests: a ``KnowledgeBase`` answers ``search`` with at most ``top_k``
  ``VectorSearchResult`` objects, best first (documents in and out: test_agentscope_adapter.py).
"""
from __future__ import annotations

import asyncio

import pytest

QUESTION = "In which city was the founder of the Vellmar Observatory born?"


def test_haystack_component_sockets_connections_async_run_and_serialisation(rag, tmp_path, corpus):
    pytest.importorskip("haystack", reason="needs the haystack extra")
    from haystack import Document, Pipeline
    from haystack.components.joiners import DocumentJoiner
    from haystack.core.serialization import component_from_dict, component_to_dict

    from hippo_engine.integrations.haystack import HippoRetriever, HippoWriter

    pipe = Pipeline()
    pipe.add_component("retriever", HippoRetriever(rag, top_k=3))
    pipe.add_component("joiner", DocumentJoiner(top_k=2))
    pipe.connect("retriever.documents", "joiner.documents")       # Haystack checks the socket types here
    inputs = pipe.inputs()["retriever"]
    assert inputs["query"] == {"type": str, "is_mandatory": True}
    assert {name for name, socket in inputs.items() if not socket["is_mandatory"]} == {"top_k", "where", "mode"}
    assert pipe.outputs()["joiner"]["documents"]["type"] == list[Document]
    (sol,) = rag.retrieve([QUESTION], 3)
    joined = pipe.run({"retriever": {"query": QUESTION}})["joiner"]["documents"]
    assert [d.id for d in joined] == sol.passage_ids[:2]
    async_run = asyncio.run(pipe.run_async({"retriever": {"query": QUESTION}}))["joiner"]["documents"]
    assert [d.id for d in async_run] == [d.id for d in joined]

    folder = str(tmp_path / "mem")
    options = {"extractor": "ner", "show_progress": False}
    HippoWriter(folder, rag_options=options).run([Document(id="d0", content=f"{corpus[0]['title']}\n"
                                                           f"{corpus[0]['text']}")])
    data = component_to_dict(HippoRetriever(folder, top_k=2, where={"x": 1}, rag_options=options), "retriever")
    assert data["init_parameters"]["top_k"] == 2 and data["init_parameters"]["where"] == {"x": 1}
    back = component_from_dict(HippoRetriever, data, "retriever")
    assert back.search.options() == {"mode": None, "top_k": 2, "where": {"x": 1}, "explain": False}
    writer = component_from_dict(HippoWriter, component_to_dict(HippoWriter(folder, rag_options=options), "w"), "w")
    assert writer.search.rag.save_dir == back.search.rag.save_dir


def test_llamaindex_retriever_takes_strings_and_query_bundles_sync_and_async(rag):
    pytest.importorskip("llama_index.core", reason="needs the llamaindex extra")
    from llama_index.core.base.base_retriever import BaseRetriever
    from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

    from hippo_engine.integrations.llamaindex import HippoRetriever

    retriever = HippoRetriever(rag, similarity_top_k=3)
    assert isinstance(retriever, BaseRetriever)
    (sol,) = rag.retrieve([QUESTION], 3)
    for nodes in (retriever.retrieve(QUESTION), retriever.retrieve(QueryBundle(QUESTION)),
                  asyncio.run(retriever.aretrieve(QUESTION)), asyncio.run(retriever.aretrieve(QueryBundle(QUESTION)))):
        assert all(isinstance(n, NodeWithScore) and isinstance(n.node, TextNode) for n in nodes)
        assert [n.node.node_id for n in nodes] == sol.passage_ids
        assert [n.score for n in nodes] == sorted((n.score for n in nodes), reverse=True)


def test_agentscope_search_returns_at_most_top_k_results_best_first(rag):
    pytest.importorskip("agentscope", reason="needs the agentscope extra")
    from agentscope.rag import KnowledgeBase, VectorSearchResult

    from hippo_engine.integrations.agentscope import HippoKnowledgeBase

    kb = HippoKnowledgeBase(rag)
    assert isinstance(kb, KnowledgeBase)
    for top_k in (1, 4):
        results = asyncio.run(kb.search(queries=[QUESTION], top_k=top_k, score_threshold=None))   # as RAGMiddleware
        assert len(results) == top_k and all(isinstance(r, VectorSearchResult) for r in results)
        assert [r.score for r in results] == sorted((r.score for r in results), reverse=True)
    assert asyncio.run(kb.search(queries=[], top_k=3)) == []
