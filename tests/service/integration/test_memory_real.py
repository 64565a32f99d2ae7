"""Memory on real components: the real embedder, extractor="ner" (spaCy, no LLM), the bundled sample corpus,
background ingestion, retrieval, explanations, the subgraph, and answers from a reader on a real HTTP server
(127.0.0.1) that speaks the OpenAI API."""
from __future__ import annotations

import json
from importlib import resources

import pytest
from openai_server import FakeOpenAIServer

from hippo_engine.service.workspaces import Workspaces


def _sample() -> dict:
    return json.loads(resources.files("hippo_engine").joinpath("data/sample_corpus.json").read_text("utf-8"))


def _reply(messages) -> str:
    return "Answer: Dunhaven [1]"


@pytest.fixture(scope="module")
def reader():
    with FakeOpenAIServer(responder=_reply, max_requests=50) as srv:
        yield srv


@pytest.fixture(scope="module")
def spaces(tmp_path_factory, reader):
    ws = Workspaces(tmp_path_factory.mktemp("svc"), rag_options={
        "extractor": "ner", "show_progress": False, "llm_model_name": "reader", "llm_base_url": reader.base_url,
        "llm_api_key": "sk-test", "llm_cache": False, "llm_timeout": 30},
        memory_options={"batch_size": 5, "poll_s": 0.1})
    sample = _sample()
    mem = ws.get("sample", create=True)
    job = mem.add([{"id": f"s{i}", "title": d["title"], "text": d["text"], "metadata": {"n": i}}
                   for i, d in enumerate(sample["corpus"])])
    assert mem.wait(job["job_id"], timeout=600)
    yield ws
    ws.close()


def test_added_documents_are_indexed_in_the_background_and_retrieved(spaces):
    mem = spaces.get("sample", create=False)
    sample = _sample()
    n = len(sample["corpus"])
    assert mem.documents(status="indexed")["total"] == n
    assert set(mem.rag.index_state.all_documents()) == {f"s{i}" for i in range(n)}
    titles = {d["title"]: f"s{i}" for i, d in enumerate(sample["corpus"])}
    hits = 0
    for q in sample["questions"]:
        got = mem.retrieve([q["question"]], top_k=5)[0]
        ids = {d for p in got["passages"] for d in p["doc_ids"]}
        hits += all(titles[t] in ids for t in q["supporting_titles"])
    assert hits >= len(sample["questions"]) // 2, hits
    stats = mem.stats()
    assert stats["documents"]["indexed"] == n and stats["extractor"] == "ner"
    assert stats["graph"]["passage_nodes"] == n


def test_explain_and_subgraph_on_the_real_index(spaces):
    mem = spaces.get("sample", create=False)
    q = "In which city was the founder of the Vellmar Observatory born?"
    got = mem.retrieve([q], top_k=3, explain=True)[0]
    assert len(got["explanations"]) == 3
    assert [e["passage_id"] for e in got["explanations"]] == [p["id"] for p in got["passages"]]
    ex = mem.explain(q, top=2)
    assert [e["passage_id"] for e in ex] == [p["id"] for p in got["passages"][:2]]
    g = mem.subgraph(q, top=3, limit=40)
    kinds = {n["kind"] for n in g["nodes"]}
    assert {"query", "passage", "seed"} <= kinds and len(g["nodes"]) <= 40
    ids = {n["id"] for n in g["nodes"]}
    assert g["edges"] and all(e["source"] in ids and e["target"] in ids for e in g["edges"])
    json.dumps(g)


def test_answers_cite_retrieved_passages(spaces, reader):
    mem = spaces.get("sample", create=False)
    out = mem.answer("In which city was the founder of the Vellmar Observatory born?", top_k=3)
    assert out["answer"] == "Dunhaven"
    assert len(out["passages"]) == 3
    assert [c["id"] for c in out["citations"]] == [out["passages"][0]["id"]]
    assert reader.requests                         # the reader was asked over HTTP
    json.dumps(out)


def test_a_deleted_document_leaves_retrieval(spaces):
    mem = spaces.get("sample", create=False)
    q = "Who founded the Vellmar Observatory?"
    top = mem.retrieve([q], top_k=1)[0]["passages"][0]
    doc = top["doc_ids"][0]
    assert mem.delete([doc]) == {"deleted": [doc], "unknown": []}
    assert all(doc not in p["doc_ids"] for p in mem.retrieve([q], top_k=14)[0]["passages"])
    assert mem.document(doc) is None
