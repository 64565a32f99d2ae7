"""The Haystack adapter in Haystack's own Pipeline, on a real memory (real embedder, spaCy NER)."""
from __future__ import annotations

import pytest

pytest.importorskip("haystack", reason="needs the haystack extra")
from haystack import Document, Pipeline  # noqa: E402
from haystack.core.errors import PipelineRuntimeError  # noqa: E402

from hippo_engine.integrations.examples import haystack_pipeline  # noqa: E402
from hippo_engine.integrations.haystack import HippoRetriever, HippoWriter  # noqa: E402

QUESTION = "In which city was the founder of the Vellmar Observatory born?"


def retrieve(component, **inputs) -> list:
    pipe = Pipeline()
    pipe.add_component("retriever", component)
    return pipe.run({"retriever": {"query": QUESTION, **inputs}})["retriever"]["documents"]


def test_example_pipeline_answers_from_the_retrieved_passages(tmp_path, server, sent):
    out = haystack_pipeline.main(["--save-dir", str(tmp_path), "--base-url", server.base_url, "--top-k", "3"])
    assert out["answer"] == "Dunhaven"        # the scripted model saw Ilse Marrow's passage
    assert [s["hippo_rank"] for s in out["sources"]] == [1, 2, 3]
    assert out["sources"][0]["title"] == "Vellmar Observatory"
    (prompt,) = sent(server)
    assert "[1] Vellmar Observatory" in prompt and "Question: " + QUESTION in prompt


def test_retriever_documents_carry_ids_scores_and_metadata(rag):
    docs = retrieve(HippoRetriever(rag, top_k=4))
    (sol,) = rag.retrieve([QUESTION], 4)
    assert [d.id for d in docs] == sol.passage_ids and [d.content for d in docs] == sol.docs
    assert [d.score for d in docs] == pytest.approx([float(s) for s in sol.doc_scores])
    assert [d.meta["hippo_rank"] for d in docs] == [1, 2, 3, 4]
    assert [d.meta["hippo_doc_ids"] for d in docs] == sol.doc_ids
    assert docs[0].meta["hippo_documents"] == {"s0": {"title": "Vellmar Observatory", "user": "alice"}}
    assert all(d.meta["hippo_mode"] == "hipporag2" and "hippo_explanation" not in d.meta for d in docs)


def test_retriever_options_where_mode_and_explain(rag):
    bob = retrieve(HippoRetriever(rag, top_k=3, where={"user": "bob"}))
    assert bob and all(d.meta["hippo_documents"][d.meta["hippo_doc_ids"][0]]["user"] == "bob" for d in bob)
    explained = retrieve(HippoRetriever(rag, top_k=2, explain=True))
    assert [d.meta["hippo_explanation"]["passage_id"] for d in explained] == [d.id for d in explained]
    assert explained[0].meta["hippo_explanation"]["seeds"]
    for mode in ("naive", "hi_local"):
        docs = retrieve(HippoRetriever(rag, top_k=3), mode=mode)       # a run input overrides the mode
        (sol,) = rag.retrieve([QUESTION], 3, mode=mode)
        assert [d.id for d in docs] == sol.passage_ids and docs[0].meta["hippo_mode"] == mode
    hi = retrieve(HippoRetriever(rag, top_k=2, mode="hi_local", explain=True))
    assert hi[0].meta["hippo_explanation"]["kind"] == "passage" and hi[0].meta["hippo_explanation"]["id"] == hi[0].id
    with pytest.raises(PipelineRuntimeError, match="no_such_mode"):
        retrieve(HippoRetriever(rag, mode="no_such_mode"))


def test_writer_indexes_documents_a_retriever_then_finds(tmp_path, corpus):
    folder = str(tmp_path / "mem")
    options = {"extractor": "ner", "show_progress": False}
    docs = [Document(id=f"h{i}", content=f"{d['title']}\n{d['text']}", meta={"team": "red" if i < 7 else "blue"})
            for i, d in enumerate(corpus)]
    pipe = Pipeline()
    pipe.add_component("writer", HippoWriter(folder, rag_options=options))
    assert pipe.run({"writer": {"documents": docs}})["writer"]["documents_written"] == len(docs)
    assert pipe.run({"writer": {"documents": docs}})["writer"]["documents_written"] == 0    # unchanged
    # a pipeline built from a folder serialises and loads back
    reader = Pipeline()
    reader.add_component("retriever", HippoRetriever(folder, top_k=3, where={"team": "red"}, rag_options=options))
    loaded = Pipeline.loads(reader.dumps(), allowed_modules=["hippo_engine.integrations.haystack"])
    found = loaded.run({"retriever": {"query": QUESTION}})["retriever"]["documents"]
    assert found[0].content.startswith("Vellmar Observatory")
    assert all(int(d.meta["hippo_doc_ids"][0][1:]) < 7 for d in found)
    with pytest.raises(Exception, match="no text content"):
        pipe.run({"writer": {"documents": [Document(id="empty", content="  ")]}})


def test_a_component_built_from_a_memory_object_refuses_to_serialise(rag):
    with pytest.raises(TypeError, match="save folder"):
        HippoRetriever(rag).to_dict()


def test_an_option_the_components_do_not_take_is_refused_with_haystacks_names(rag):
    """Haystack's convention (issue 39): the number of documents is ``top_k``; another framework's spelling or an
    unknown option is a TypeError that names it and what to use instead, in the constructor and in run()."""
    with pytest.raises(TypeError, match=r"no option 'k' \(Haystack's number of documents is top_k\)"):
        HippoRetriever(rag, k=2)
    with pytest.raises(TypeError, match=r"'filters' \(filter by document metadata with where="):
        HippoRetriever(rag, filters={"field": "meta.user", "operator": "==", "value": "bob"})
    with pytest.raises(TypeError, match=r"HippoRetriever.run\(\) has no option 'similarity_top_k'.*options: query"):
        HippoRetriever(rag).run(QUESTION, similarity_top_k=2)
    with pytest.raises(ValueError, match="'k' not found"):       # in a Pipeline, Haystack's own check still speaks
        retrieve(HippoRetriever(rag), k=2)
    with pytest.raises(TypeError, match=r"HippoWriter has no option 'policy'; its options: memory, rag_options"):
        HippoWriter(rag, policy="overwrite")
    assert len(retrieve(HippoRetriever(rag, top_k=2))) == 2 and len(retrieve(HippoRetriever(rag), top_k=1)) == 1
