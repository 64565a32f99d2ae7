"""Micro-batching on a real server: ``hippo-engine serve`` (extractor ``ner``, the packaged embedder) on 127.0.0.1
over the bundled sample corpus; 16 ``POST /retrieve`` requests sent at once (12 with explanations, 4 with other
options) each get exactly the answer of the same query run alone in process (same ids, same scores, same
explanations), and ``/stats`` shows that they ran in fewer batches than requests."""
from __future__ import annotations

import json

import pytest
from helpers import together
from test_http_server import DOCS, QUESTIONS, Serve, add_and_wait

from hippo_engine import HippoRAG
from hippo_engine.service import results

QUERIES = [q["question"] for q in QUESTIONS] + [f"What is known about {d['title']}?" for d in DOCS]


def _concurrently(client, bodies: list[dict]) -> list:
    """POST each body to /retrieve from a thread of its own, all released at once; the responses in order."""
    return together([lambda b=b: client.post("/retrieve", json=b) for b in bodies], timeout=300)


def _alone(save_dir, bodies: list[dict]) -> list[dict]:
    """Each body's single query run by itself in this process on the same index, as the server shows it."""
    rag = HippoRAG(save_dir, extractor="ner", show_progress=False)
    try:
        out = []
        for b in bodies:
            sol = rag.retrieve([b["query"]], b["top_k"], explain=b["explain"])[0]
            out.append(json.loads(json.dumps(results.retrieval(sol, "hipporag2", b["explain"]))))
        return out
    finally:
        rag.close()


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    save_dir = tmp_path_factory.mktemp("batching") / "memory"
    srv = Serve(save_dir, None, "--batch-window-ms", "40")
    try:
        job = add_and_wait(srv.client, DOCS)
        assert job["status"] == "done" and job["progress"]["indexed"] == len(DOCS), job
        yield srv, save_dir
    finally:
        srv.stop()


def test_concurrent_retrieves_are_batched_and_each_equals_its_query_alone(served):
    srv, save_dir = served
    bodies = [{"query": q, "top_k": 3, "explain": True} for q in QUERIES[:12]]
    bodies += [{"query": q, "top_k": 5, "explain": False} for q in QUERIES[12:16]]
    before = srv.client.get("/stats").json()["batching"]
    responses = _concurrently(srv.client, bodies)
    assert all(r.status_code == 200 for r in responses), [r.text for r in responses if r.status_code != 200]
    got = [r.json()["results"][0] for r in responses]
    after = srv.client.get("/stats").json()["batching"]
    requests, batches = after["requests"] - before["requests"], after["batches"] - before["batches"]
    assert requests == len(bodies) and after["queries"] - before["queries"] == len(bodies)
    assert batches < requests and after["largest_batch"] >= 2, after        # gathered, not one by one
    assert after["window_ms"] == 40.0 and after["isolated_reruns"] == 0
    assert all(g["passages"] for g in got) and all(g["explanations"] for g in got[:12])
    srv.stop()                      # the index to itself: the same queries alone, in this process
    assert got == _alone(save_dir, bodies)
